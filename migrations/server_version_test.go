package migrations_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/migrations"
)

func TestServerVersion(t *testing.T) {
	s, err := migrations.ServerVersion(context.Background(), pgtest.Pool(t))
	require.NoError(t, err)
	require.GreaterOrEqual(t, s.Num, migrations.MinServerVersion*10000)
	require.Regexp(t, `^\d+\.\d+`, s.Version)
	if v := os.Getenv("ALMANAC_PG_VERSION"); v != "" {
		require.Equal(t, v, strconv.Itoa(s.Num/10000), "the server of the version matrix")
	}
}
