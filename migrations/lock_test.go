package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/migrations"
)

// TestNoGrantCannotStallMigrations: a role with no grant holds the
// advisory key migrations once serialized on. Migrating up and down a
// schema that has its version table does not wait for it; migrating a
// schema that has none yet (whose first migrators still queue on that
// key) gives up after the bounded wait with an error that names the lock,
// and succeeds once the key is free. Before, every one of them waited for
// as long as the role held the key.
func TestNoGrantCannotStallMigrations(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	_, err = migrations.Down(ctx, pool, schema, len(migrations.All())-1)
	require.NoError(t, err)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := "almanac_test_nogrant_" + hex.EncodeToString(b)
	_, err = pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP ROLE `+role) })
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	hold := func(schema string) {
		_, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, "almanac.migrate:"+schema)
		require.NoError(t, err)
	}
	hold(schema)

	bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	applied, err := migrations.Up(bounded, pool, schema)
	require.NoError(t, err)
	require.Equal(t, []int{len(migrations.All())}, applied)
	undone, err := migrations.Down(bounded, pool, schema, len(migrations.All())-1)
	require.NoError(t, err)
	require.Equal(t, []int{len(migrations.All())}, undone)

	fresh := pgtest.Schema(t)
	_, err = pool.Exec(ctx, `DROP SCHEMA `+fresh)
	require.NoError(t, err)
	hold(fresh)
	wait := *migrations.BootstrapWait
	*migrations.BootstrapWait = 200 * time.Millisecond
	defer func() { *migrations.BootstrapWait = wait }()
	_, err = migrations.Up(bounded, pool, fresh)
	require.ErrorIs(t, err, migrations.ErrLocked)
	require.ErrorContains(t, err, "hashtextextended('almanac.migrate:"+fresh+"', 0)")
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
	_, err = migrations.Up(bounded, pool, fresh)
	require.NoError(t, err)
}
