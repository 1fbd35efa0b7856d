package pgcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFindVersion: a version is found where system packages or
// .ci/pg-install put it, and only if its programs say they are that
// version.
func TestFindVersion(t *testing.T) {
	root := t.TempDir()
	// install puts programs that report version reported in dir.
	install := func(dir, reported string) string {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, name := range []string{"initdb", "pg_ctl"} {
			script := fmt.Sprintf("#!/bin/sh\necho '%s (PostgreSQL) %s'\n", name, reported)
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755))
		}
		return dir
	}
	debian := filepath.Join(root, "debian")
	cache := filepath.Join(root, "cache")
	other := filepath.Join(root, "other")

	_, err := findVersion(16, debian, []string{cache})
	require.ErrorIs(t, err, ErrNoBinaries)
	require.ErrorContains(t, err, "install them with .ci/pg-install 16")
	require.ErrorContains(t, err, filepath.Join(cache, "16", "bin"), "says where it looked")

	cached := install(filepath.Join(cache, "16", "bin"), "16.14")
	got, err := findVersion(16, debian, []string{other, cache})
	require.NoError(t, err)
	require.Equal(t, cached, got)

	packaged := install(filepath.Join(debian, "16", "bin"), "16.4 (Debian 16.4-1.pgdg120+1)")
	got, err = findVersion(16, debian, []string{cache})
	require.NoError(t, err)
	require.Equal(t, packaged, got, "the system's package first")

	// A directory whose programs are another version is passed over.
	install(filepath.Join(cache, "17", "bin"), "16.14")
	_, err = findVersion(17, debian, []string{cache})
	require.ErrorIs(t, err, ErrNoBinaries)
}

func TestMajorVersionOnThisMachine(t *testing.T) {
	dir, err := Find()
	require.NoError(t, err)
	major, err := MajorVersion(dir)
	require.NoError(t, err)
	require.GreaterOrEqual(t, major, 14)
	got, err := FindVersion(major)
	require.NoError(t, err)
	got2, err := MajorVersion(got)
	require.NoError(t, err)
	require.Equal(t, major, got2)
}
