package coverage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestRangeReadsPlannedPerCall: a connection that searched for gaps while
// the slot table was empty (a new schema, vacuumed) must not go on reading
// the whole table for every range once it has grown. With statements
// prepared once, the generic plan made from the empty table was a
// sequential scan, kept for the life of the connection: materializing
// scanned the table again for every chunk. The chunks and the last search
// run in one transaction on that connection, whose own scans its
// unreported counter counts exactly: the server-wide counter also
// took in, at whatever moment they were reported, the index builds of the
// shared pool's connections, which other tests may hold busy.
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
	// The first chunk goes into the empty table, which is best read whole.
	const chunk = 2_000 * time.Minute
	_, err = c.Materialize(ctx, from, from.Add(chunk), WriteOptions{})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	in := c.WithTx(tx)
	before := scans(t, tx, f.db.Schema)
	const chunks = 29 // each statement runs past the plan cache's 5 custom plans
	var inserted int64
	for k := range chunks {
		start := from.Add(time.Duration(k+1) * chunk)
		res, err := in.Materialize(ctx, start, start.Add(chunk), WriteOptions{})
		require.NoError(t, err)
		inserted += res.Inserted
	}
	require.EqualValues(t, chunks*2_000, inserted)
	for _, err := range in.Gaps(ctx, from, from.Add(2*(chunks+1)*chunk)) {
		require.NoError(t, err)
	}
	require.Zero(t, scans(t, tx, f.db.Schema)-before, "sequential scans of the slot table while materializing %d chunks of 2,000 slots", chunks)
}

// scans returns the sequential scans of the slot table that tx's backend
// has not yet reported: a backend reports only when idle outside a
// transaction, so within tx the difference of two readings is what tx
// scanned, whatever other backends do.
func scans(t *testing.T, tx pgx.Tx, schema string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT pg_stat_get_xact_numscans($1::regclass)`, schema+".slot").Scan(&n))
	return n
}

// TestOperationsScaleWithoutStatistics: re-open, retry and skip must do
// work in proportion to the slots of a chunk, not to its square, when the
// planner knows nothing of them: a series loaded by plain SQL before any
// ANALYZE, and slots inserted in the operation's own transaction after an
// ANALYZE that saw none (as a re-open restores compacted slots before it
// re-opens them). Both estimate every range of the series at one row, and
// a join of the rows locked with the rows read would run as a nested loop
// over both (docs/design/plan-stable-sql.md, rule 6).
// Each statement runs under EXPLAIN ANALYZE, with custom and generic
// plans, in a transaction rolled back, and the rows every node of its plan
// produced or filtered out, over all its loops, are summed.
func TestOperationsScaleWithoutStatistics(t *testing.T) {
	const slots = 4_000
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(slots * time.Minute)
	statements := []struct {
		name string
		sql  func(s statements) string
		args []any // after the series and the range
	}{
		{"reopen", func(s statements) string { return s.reopen }, []any{[]string{statusComplete, statusSkip}, true, "late"}},
		{"reopen dry run", func(s statements) string { return s.reopenDry }, []any{[]string{statusComplete, statusSkip}, true}},
		{"retry", func(s statements) string { return s.retry }, nil},
		{"retry dry run", func(s statements) string { return s.retryDry }, nil},
		{"skip", func(s statements) string { return s.skip }, []any{"no data"}},
		{"skip dry run", func(s statements) string { return s.skipDry }, nil},
	}
	for _, analyzed := range []bool{false, true} {
		f := newFixture(t, series(t, "unplanned", "PT1M", "UTC", time.Time{}), Options{})
		if analyzed {
			f.exec(`ANALYZE {{schema}}.slot`)
		}
		for _, st := range statements {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				t.Run(fmt.Sprintf("analyzed=%v/%s/%s", analyzed, st.name, mode), func(t *testing.T) {
					work := f.planWork(t, mode, st.sql(*f.c.sql), st.args, from, to, slots)
					t.Logf("%d rows through the plan for %d slots", work, slots)
					require.Less(t, work, int64(40*slots), "rows through the plan of %s over %d slots without statistics", st.name, slots)
				})
			}
		}
	}
}

// planWork inserts slots slots from from, a sixth in each state (due,
// backed-off and parked AVAILABLE, ACQUIRED, COMPLETE, SKIP), and returns
// pgtest.PlanWork of sql over [from, to) with args after the series and
// the range, in a transaction it rolls back.
func (f *fixture) planWork(t *testing.T, mode, sql string, args []any, from, to time.Time, slots int) int64 {
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	_, err = tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, not_before, owner, lease_until, completed_at)
		SELECT 'unplanned', 'PT1M', $1::timestamptz + k * interval '1 minute', $1::timestamptz + (k + 1) * interval '1 minute',
			(ARRAY['AVAILABLE', 'AVAILABLE', 'AVAILABLE', 'ACQUIRED', 'COMPLETE', 'SKIP'])[k % 6 + 1],
			(ARRAY[NULL, 'infinity', now() + interval '1 hour', NULL, NULL, NULL]::timestamptz[])[k % 6 + 1],
			CASE WHEN k % 6 = 3 THEN gen_random_uuid() END, CASE WHEN k % 6 = 3 THEN now() + interval '1 hour' END,
			CASE WHEN k % 6 = 4 THEN now() END
		FROM generate_series(0, $2 - 1) AS k`, f.db.Schema), from, slots)
	require.NoError(t, err)
	return pgtest.PlanWork(t, tx, mode, sql, append([]any{"unplanned", "PT1M", from, to}, args...)...)
}
