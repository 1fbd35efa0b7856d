package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/demo/pgcluster"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// TestOutageLeavesLeasesToTheirHolders: the server is stopped for longer
// than the lease and the takeover grace while the holders of three leases,
// their work done, wait to record it. The database clock runs on while the
// server is down, so when it comes back their leases have been expired for
// longer than the grace; the grace counts from the server's start, so the
// claim that comes first takes none of them over, and each holder records
// its outcome: no slot runs twice. A fourth lease, whose holder died, is
// taken over once the server has been up for the grace. Before, the first
// claim after the outage took all four over, and the three holders' writes
// were refused as stale.
func TestOutageLeavesLeasesToTheirHolders(t *testing.T) {
	const ttl, grace = time.Second, 2 * time.Second
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Settings: pgcluster.FastSettings})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Destroy()) })
	pool := pgtest.OwnPool(t, cluster.URL("postgres"), 8, "")
	const schema = "almanac"
	_, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	grid, err := slot.NewSeries("report", mustInterval("PT1M"), time.UTC, time.Time{})
	require.NoError(t, err)
	_, _, err = seriesdb.Add(ctx, pool, schema, grid)
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = pool.Exec(ctx, `INSERT INTO almanac.slot (name, "interval", slot_start, slot_end)
		SELECT 'report', 'PT1M', s, s + interval '1 minute' FROM generate_series($1::timestamptz, $1::timestamptz + interval '3 minutes', interval '1 minute') AS s`, from)
	require.NoError(t, err)
	opts := Options{Schema: schema, Policy: Policy{LeaseTTL: ttl, TakeoverGrace: grace}}
	holder, err := New(ctx, pool, grid, opts)
	require.NoError(t, err)
	claimer, err := New(ctx, pool, grid, opts)
	require.NoError(t, err)
	leases, err := holder.Claim(ctx, 4)
	require.NoError(t, err)
	require.Len(t, leases, 4)
	expired := leases[0].Until()
	for _, l := range leases {
		if l.Until().After(expired) {
			expired = l.Until()
		}
	}

	require.NoError(t, cluster.Stop(ctx, "fast"))
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recorded := make(chan error, 3)
	for _, l := range leases[:3] {
		go func() {
			_, _, err := l.Finish(wctx, nil)
			recorded <- err
		}()
	}
	// Wait out the lease and the grace on the clock of the test's other
	// server, the same host's clock as this one's.
	_, err = pgtest.Pool(t).Exec(ctx, `SELECT pg_sleep_until($1)`, expired.Add(grace+100*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, cluster.Start(ctx))

	var outlasted, inGrace bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp() > $1::timestamptz, clock_timestamp() < pg_postmaster_start_time() + $2::interval`,
		expired.Add(grace), grace.String()).Scan(&outlasted, &inGrace))
	require.True(t, outlasted, "the outage outlasted the leases and the grace")
	if inGrace { // not otherwise: the machine took the whole grace to get here
		taken, err := claimer.Claim(ctx, 4)
		require.NoError(t, err)
		require.Empty(t, taken, "no lease is taken over within the grace after the server's start")
	} else {
		t.Log("the server had been up for the grace before the first claim; no claim raced the holders")
	}
	for range 3 {
		require.NoError(t, <-recorded, "the holder records its outcome after the outage")
	}
	for _, l := range leases[:3] {
		var status string
		var fence int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, fence FROM almanac.slot WHERE slot_start = $1`, l.Start).Scan(&status, &fence))
		require.Equal(t, "COMPLETE", status)
		require.Equal(t, l.Fence, fence, "completed by its holder, not run again")
	}

	// The dead holder's lease is taken over once the server has been up
	// for the grace.
	_, err = pool.Exec(ctx, `SELECT pg_sleep_until(pg_postmaster_start_time() + $1::interval)`, grace.String())
	require.NoError(t, err)
	taken, err := claimer.Claim(ctx, 4)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.True(t, taken[0].TookOver)
	require.True(t, taken[0].Start.Equal(leases[3].Start))
}
