package scheduler

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/input"
)

// errBadEnv is wrapped by the errors of checkEnv; it matches ErrInvalid.
var errBadEnv = input.Kind("invalid environment entry")

// defaultEnv lists the variables a Command gets from the scheduler's
// environment without being asked, besides every LC_* variable: what
// programs need to find other programs, files and the user's locale, and
// nothing that grants access to anything. Command's godoc repeats it.
var defaultEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "TMPDIR"}

// slotVars are the names of the variables Command sets for every slot
// (slotEnv); Env cannot set them.
var slotVars = func() []string {
	var names []string
	for _, kv := range slotEnv(acquire.Slot{}) {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return names
}()

// isSecretEnv reports whether a variable holds database credentials, which
// a command gets only when Command.Env names it, even with Command.EnvAll:
//
//   - by its name: DATABASE_URL, every ALMANAC_*_URL (such as
//     ALMANAC_LISTEN_URL) and every variable starting with PG (libpq's
//     PGPASSWORD, PGPASSFILE, PGSERVICE, PGSSLKEY, ... and the PGHOST,
//     PGUSER that go with them);
//   - by its value: a PostgreSQL connection string (see connString), or
//     one of passwords, those of the scheduler's connections.
func isSecretEnv(name, value string, passwords []string) bool {
	if name == "DATABASE_URL" || strings.HasPrefix(name, "ALMANAC_") && strings.HasSuffix(name, "_URL") ||
		strings.HasPrefix(name, "PG") || connString.MatchString(value) {
		return true
	}
	return slices.ContainsFunc(passwords, func(p string) bool { return strings.Contains(value, p) })
}

// connString finds a PostgreSQL connection string in a value: a URL
// (postgres:// or postgresql://, also inside another, as in a JDBC URL),
// or libpq keyword/value pairs that name a host, a database or a password.
var connString = regexp.MustCompile(`(?i)postgres(?:ql)?://|(?:^|\s)(?:host|hostaddr|dbname|password|passfile|service)\s*=`)

// checkEnv checks one Command.Env entry: NAME or NAME=value, NAME made of
// ASCII letters, digits and underscores and not starting with a digit, and
// not one of the slot variables. The error wraps errBadEnv and quotes
// entry.
func checkEnv(entry string) error {
	name, value, _ := strings.Cut(entry, "=")
	switch {
	case !validEnvName(name):
		return fmt.Errorf("%w %q: expected NAME or NAME=value, NAME made of letters, digits and _ and not starting with a digit", errBadEnv, entry)
	case slices.Contains(slotVars, name):
		return fmt.Errorf("%w %q: %s is set by almanac for every slot", errBadEnv, entry, name)
	case strings.ContainsRune(value, 0):
		return fmt.Errorf("%w %q: a value cannot hold a NUL byte", errBadEnv, entry)
	}
	return nil
}

func validEnvName(name string) bool {
	if name == "" || '0' <= name[0] && name[0] <= '9' {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// environ is the command's environment without the slot variables: the
// defaultEnv and LC_* variables of the scheduler's environment (all of it
// but the secrets with EnvAll; passwords are those of the scheduler's
// connections), then Env's entries.
func (c Command) environ(passwords []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if slices.Contains(defaultEnv, name) || strings.HasPrefix(name, "LC_") || c.EnvAll && !isSecretEnv(name, value, passwords) {
			env = append(env, kv)
		}
	}
	for _, e := range c.Env {
		if strings.Contains(e, "=") {
			env = append(env, e)
		} else if v, ok := os.LookupEnv(e); ok {
			env = append(env, e+"="+v)
		}
	}
	return env
}

// lookupEnv returns the value of name in env; the last entry wins, as in
// exec.
func lookupEnv(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}
