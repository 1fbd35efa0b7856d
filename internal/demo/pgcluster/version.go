package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The directories .ci/pg-install puts each major version in, as
// <dir>/<major>/bin: $ALMANAC_PG_CACHE when set, else both of its defaults
// (root's and other users').
var (
	systemCache = "/var/cache/almanac-pg"
	userCache   = func() string {
		if dir, err := os.UserCacheDir(); err == nil {
			return filepath.Join(dir, "almanac-pg")
		}
		return ""
	}
)

// FindVersion returns the directory holding initdb and pg_ctl of PostgreSQL
// major version major (e.g. 16), as their --version reports it. It looks
// where system packages put each version (Debian's
// /usr/lib/postgresql/<major>/bin, the PGDG RPMs' /usr/pgsql-<major>/bin,
// Homebrew's postgresql@<major>), then where .ci/pg-install puts them. If
// none has that version it returns an error wrapping ErrNoBinaries that
// says how to install it.
func FindVersion(major int) (string, error) {
	caches := []string{os.Getenv("ALMANAC_PG_CACHE")}
	if caches[0] == "" {
		caches = []string{systemCache, userCache()}
	}
	return findVersion(major, debianRoot, caches)
}

func findVersion(major int, debian string, caches []string) (string, error) {
	v := strconv.Itoa(major)
	candidates := []string{
		filepath.Join(debian, v, "bin"),
		"/usr/pgsql-" + v + "/bin",
		"/opt/homebrew/opt/postgresql@" + v + "/bin",
		"/usr/local/opt/postgresql@" + v + "/bin",
	}
	for _, c := range caches {
		if c != "" {
			candidates = append(candidates, filepath.Join(c, v, "bin"))
		}
	}
	for _, dir := range candidates {
		if !isExecutable(filepath.Join(dir, "initdb")) || !isExecutable(filepath.Join(dir, "pg_ctl")) {
			continue
		}
		if got, err := MajorVersion(dir); err == nil && got == major {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w for PostgreSQL %d (looked in %s): install them with .ci/pg-install %d, or your system's PostgreSQL %d server package",
		ErrNoBinaries, major, strings.Join(candidates, ", "), major, major)
}

var versionLine = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// MajorVersion returns the major version of the PostgreSQL programs in
// binDir, as pg_ctl --version reports it ("pg_ctl (PostgreSQL) 16.4" is
// 16).
func MajorVersion(binDir string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "pg_ctl"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("pgcluster: %s --version: %w", filepath.Join(binDir, "pg_ctl"), err)
	}
	m := versionLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgcluster: %s --version printed %q, expected e.g. pg_ctl (PostgreSQL) 16.4", filepath.Join(binDir, "pg_ctl"), out)
	}
	return strconv.Atoi(string(m[1]))
}
