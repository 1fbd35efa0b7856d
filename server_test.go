package almanac_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

func TestServerVersion(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	v, err := c.ServerVersion(ctx)
	require.NoError(t, err)
	var want string
	require.NoError(t, db.Pool.QueryRow(ctx, `SHOW server_version`).Scan(&want))
	require.Equal(t, want, v)
}
