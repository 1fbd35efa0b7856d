package pgversion_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/pgversion"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestOf(t *testing.T) {
	s, err := pgversion.Of(context.Background(), pgtest.Pool(t))
	require.NoError(t, err)
	require.GreaterOrEqual(t, s.Num, 14_00_00)
	require.Regexp(t, `^\d+\.\d+`, s.Version)
	if v := os.Getenv("ALMANAC_PG_VERSION"); v != "" {
		require.Equal(t, v, strconv.Itoa(s.Num/10000), "the server of the version matrix")
	}
}
