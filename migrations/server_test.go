package migrations

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/pgversion"
)

// TestOlderServerRefused: a server older than the minimum is named in the
// error, rather than failing on the first feature it lacks (on 13:
// operator class "timestamptz_minmax_multi_ops" does not exist).
func TestOlderServerRefused(t *testing.T) {
	err := checkServer(pgversion.Server{Version: "13.23", Num: 130023})
	require.ErrorIs(t, err, ErrServerVersion)
	require.EqualError(t, err, "PostgreSQL server too old: almanac needs PostgreSQL 14 or later, and this server runs 13.23")
	require.NoError(t, checkServer(pgversion.Server{Version: "14.0", Num: 140000}))
}
