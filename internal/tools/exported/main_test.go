package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExportedNames(t *testing.T) {
	src, err := os.ReadFile("testdata/names.go.txt")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "names.go")
	require.NoError(t, os.WriteFile(file, src, 0o644))
	n, err := exportedNames(file)
	require.NoError(t, err)
	// Exported, Alias, Generic, A, C, V, F, Exported.M, Exported.N,
	// Generic.G; not hidden, b, w, f, the unexported method, nor a method
	// of an unexported type.
	require.Equal(t, 10, n)
}

func TestPublic(t *testing.T) {
	for rel, want := range map[string]bool{
		".": true, "slot": true, "acquire": true, "internal/retry": false, "internal/testkit/pgtest": false,
		"cmd/almanac": false, "examples/quickstart": false,
	} {
		require.Equal(t, want, public(rel), rel)
	}
}
