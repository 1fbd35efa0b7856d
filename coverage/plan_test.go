package coverage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestRangeReadsPlannedPerCall: a connection that searched for gaps while
// the slot table was empty (a new schema, vacuumed) must not go on reading
// the whole table for every range once it has grown. With statements
// prepared once, the generic plan made from the empty table was a
// sequential scan, kept for the life of the connection: materializing
// scanned the table again for every chunk. The scans are counted by the
// server's statistics, flushed on the test's own connection.
func TestRangeReadsPlannedPerCall(t *testing.T) {
	ctx := context.Background()
	grid := series(t, "plan", "PT1M", "UTC", utc("2026-01-01T00:00:00Z"))
	f := newFixture(t, grid, Options{})
	pool := pgtest.OwnPool(t, f.db.URL, 1, "") // every statement on one connection, with its cached plans
	c, err := New(ctx, pool, grid, Options{Schema: f.db.Schema, ChunkSize: 2_000})
	require.NoError(t, err)

	f.exec(`VACUUM ANALYZE {{schema}}.slot`)
	from := utc("2026-01-01T00:00:00Z")
	for range 8 { // past the 5 custom plans after which a generic one may be cached
		for _, err := range c.Gaps(ctx, from, from.Add(24*time.Hour)) {
			require.NoError(t, err)
		}
	}
	seqScans := func() int64 {
		pgtest.FlushStats(t, pool)
		var n int64
		require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT pg_stat_get_numscans($1::regclass)`, f.db.Schema+".slot").Scan(&n))
		return n
	}
	// The first chunk goes into the empty table, which is best read whole.
	_, err = c.Materialize(ctx, from, from.Add(2_000*time.Minute), MaterializeOptions{})
	require.NoError(t, err)
	before := seqScans()
	const slots = 60_000 // 29 more chunks
	res, err := c.Materialize(ctx, from, from.Add(slots*time.Minute), MaterializeOptions{})
	require.NoError(t, err)
	require.EqualValues(t, slots-2_000, res.Inserted)
	for _, err := range c.Gaps(ctx, from, from.Add(2*slots*time.Minute)) {
		require.NoError(t, err)
	}
	require.Zero(t, seqScans()-before, "sequential scans of the slot table while materializing %d slots in chunks of 2,000", slots)
}
