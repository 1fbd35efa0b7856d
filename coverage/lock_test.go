package coverage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestNoGrantCannotStallWriters: a role with no grant on the schema holds
// the advisory key the writers once serialized on, and tries to lock the
// series' row; materialize, skip, re-open and compact still finish,
// promptly. Before, every one of them waited for as long as the role held
// its lock.
func TestNoGrantCannotStallWriters(t *testing.T) {
	grid := series(t, "stall", "PT1M", "UTC", time.Time{})
	f := newFixture(t, grid, Options{})
	ctx := context.Background()
	conn := connectAs(t, noGrantRole(t))
	key := "almanac.coverage:" + strconv.Quote(f.db.Schema) + " " + strconv.Quote("stall") + " PT1M"
	_, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, sqlschema.Render(`SELECT 1 FROM {{schema}}.series FOR UPDATE`, f.db.Schema))
	require.ErrorContains(t, err, "permission denied", "locking the series' row needs a grant")

	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(time.Hour)
	bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = f.c.Materialize(bounded, from, to, WriteOptions{})
	require.NoError(t, err, "materialize")
	_, err = f.c.Skip(bounded, to, to.Add(time.Hour), WriteOptions{Reason: "no data"})
	require.NoError(t, err, "skip")
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE slot_start < $1`, to)
	_, err = f.c.Compact(bounded, to, WriteOptions{})
	require.NoError(t, err, "compact")
	_, err = f.c.Reopen(bounded, from, to.Add(time.Hour), WriteOptions{Reason: "late data"})
	require.NoError(t, err, "re-open")
}

// noGrantRole creates a login role with no grant at all, dropped after the
// test.
func noGrantRole(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := "almanac_test_nogrant_" + hex.EncodeToString(b)
	admin := pgtest.Pool(t)
	_, err := admin.Exec(context.Background(), `CREATE ROLE `+role+` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role) })
	return role
}

// connectAs opens a connection of its own as role, closed after the test.
func connectAs(t *testing.T, role string) *pgx.Conn {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	conn, err := pgx.ConnectConfig(context.Background(), cfg.ConnConfig)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
