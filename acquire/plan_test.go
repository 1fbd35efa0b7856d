package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestLeaseStatementsReadOnlyTheirSlots: claiming, extending and completing
// a few leases must not read the other leases of the series. Another worker
// holds 1,000 leases of a 20,000-slot series; each round here claims,
// extends and completes 10. The statements run with generic plans, the
// ones a long-lived connection ends up with, and the server's statistics
// count the rows read from the slot table's indexes and by sequential
// scans: before, a claim read every lease held to find the expired ones,
// and a completion hash-joined its list with all of them.
func TestLeaseStatementsReadOnlyTheirSlots(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 20_000)
	held, err := f.queue(Options{LeaseTTL: time.Hour}).Claim(ctx, 1_000)
	require.NoError(t, err)
	require.Len(t, held, 1_000)
	f.exec(`VACUUM ANALYZE {{schema}}.slot`)

	cfg, err := pgxpool.ParseConfig(f.db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 3 // the fewest a queue takes; nothing else uses them, so their statistics are the queue's
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	q := f.queueOn(pool, Options{LeaseTTL: time.Hour})

	round := func() {
		leases, err := q.Claim(ctx, 10)
		require.NoError(t, err)
		require.Len(t, leases, 10)
		lost, err := q.Extend(ctx, leases)
		require.NoError(t, err)
		require.Empty(t, lost)
		lost, err = q.CompleteMany(ctx, leases)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
	read := func() int64 {
		pgtest.FlushStats(t, pool)
		var n int64
		require.NoError(t, f.db.Pool.QueryRow(ctx, `
			SELECT (SELECT coalesce(sum(pg_stat_get_tuples_returned(indexrelid)), 0) FROM pg_index WHERE indrelid = $1::regclass)
				+ pg_stat_get_tuples_returned($1::regclass)`,
			f.schema+".slot").Scan(&n))
		return n
	}
	round() // prepares the statements
	before := read()
	const rounds = 5
	for range rounds {
		round()
	}
	// A round reads its own 10 slots a few times over (the claim, the
	// three parts of the heartbeat, the completion), never the 1,000
	// leases it does not hold.
	n := read() - before
	t.Logf("%d rows read in %d rounds", n, rounds)
	require.Less(t, n, int64(rounds*200),
		"rows of the slot table read in %d rounds of claiming, extending and completing 10 leases while another worker holds 1,000", rounds)
}
