package migrations

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestLoadValidatesFiles(t *testing.T) {
	ms, err := load(files)
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	require.Equal(t, 1, ms[0].Version)

	for name, fsys := range map[string]fstest.MapFS{
		"missing down": {"sql/001_a.up.sql": {Data: []byte("x")}},
		"gap":          {"sql/001_a.up.sql": {Data: []byte("x")}, "sql/001_a.down.sql": {Data: []byte("x")}, "sql/003_c.up.sql": {Data: []byte("x")}, "sql/003_c.down.sql": {Data: []byte("x")}},
		"bad name":     {"sql/one.up.sql": {Data: []byte("x")}},
		"stray file":   {"sql/001_a.sql": {Data: []byte("x")}},
		"two names":    {"sql/001_a.up.sql": {Data: []byte("x")}, "sql/001_b.down.sql": {Data: []byte("x")}},
		"version zero": {"sql/000_a.up.sql": {Data: []byte("x")}, "sql/000_a.down.sql": {Data: []byte("x")}},
		"no sql dir":   {},
	} {
		_, err := load(fsys)
		require.Error(t, err, name)
	}
}
