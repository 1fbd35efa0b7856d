package almanac

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

// sqlTally is a pgx tracer that counts the statements sent through a pool,
// by a kind that tell names.
type sqlTally struct {
	mu   sync.Mutex
	by   map[string]int
	tell func(sql string) string
}

func (s *sqlTally) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.by[s.tell(data.SQL)]++
	return ctx
}

func (s *sqlTally) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// counts returns a copy of the counts.
func (s *sqlTally) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.by {
		out[k] = v
	}
	return out
}

// scanKind tells the poll's scan from every other statement.
func scanKind(sql string) string {
	if strings.HasPrefix(strings.TrimSpace(sql), "WITH RECURSIVE open AS (") {
		return "scan"
	}
	return "other"
}

// tallyPool returns a pool of its own on db whose statements tally counts.
func tallyPool(t *testing.T, db *pgtest.DB, tally *sqlTally) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.ConnConfig.Tracer = tally
	acquire.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestPollAtRestIsOneStatement: with many series and nothing to do, each
// poll sends one statement, whatever the number of series: no claim per
// series, no statement per job.
func TestPollAtRestIsOneStatement(t *testing.T) {
	db := pgtest.New(t)
	tally := &sqlTally{by: map[string]int{}, tell: scanKind}
	pool := tallyPool(t, db, tally)
	e := newEngine(pool, Options{Schema: db.Schema, PollInterval: 20 * time.Millisecond}, nil)
	const n = 60
	for i := range n {
		// Daily series: no trigger fires during the test.
		require.NoError(t, e.add(Job{Series: series(t, fmt.Sprintf("rest_%03d", i), "P1D"),
			Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
	}
	startEngine(t, e)
	// Settled: each job ran its due slot, and a poll since found nothing.
	waitCompleted(t, db, n, time.Minute)
	waitIdle(t, e)
	before := tally.counts()
	require.Eventually(t, func() bool { return tally.counts()["scan"] >= before["scan"]+5 }, time.Minute, time.Millisecond)
	after := tally.counts()
	require.Equal(t, before["other"], after["other"], "statements other than the scan at rest, over %d polls", after["scan"]-before["scan"])
}

// TestPollFindsRetryAfterBackoff: a slot that failed, with a backoff longer
// than the poll interval (so no timer of the worker's wakes it), is run
// again once the backoff ran out, found by the poll.
func TestPollFindsRetryAfterBackoff(t *testing.T) {
	db := pgtest.New(t)
	g := series(t, "retry", "PT1M")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var runs atomic.Int32
	done := make(chan struct{})
	e := newEngine(db.Pool, Options{Schema: db.Schema, PollInterval: 50 * time.Millisecond}, nil)
	require.NoError(t, e.add(Job{Series: g, From: start, To: start.Add(time.Minute),
		Policy: Policy{Retry: func(int, error) (time.Duration, bool) { return 300 * time.Millisecond, true }},
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error {
			if runs.Add(1) == 1 {
				return errors.New("first attempt fails")
			}
			close(done)
			return nil
		}}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runUntilOneComplete(t, db, ctx, e, done, "the retry was not run after its backoff")
}

// TestPollTakesOverExpiredLease: a lease whose holder died is taken over by
// a lease-mode job, found by the poll (nothing notifies an expiry).
func TestPollTakesOverExpiredLease(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := series(t, "orphan", "PT1M")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, _, err := seriesdb.Add(ctx, db.Pool, db.Schema, g)
	require.NoError(t, err)
	cov, err := coverage.New(ctx, db.Pool, g, coverage.Options{Schema: db.Schema})
	require.NoError(t, err)
	_, err = cov.Materialize(ctx, start, start.Add(time.Minute), coverage.WriteOptions{})
	require.NoError(t, err)
	dead, err := acquire.New(ctx, db.Pool, g, acquire.Options{Schema: db.Schema, Policy: acquire.Policy{LeaseTTL: time.Second}})
	require.NoError(t, err)
	leases, err := dead.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1) // never renewed nor finished: its holder is gone

	done := make(chan struct{})
	e := newEngine(db.Pool, Options{Schema: db.Schema, PollInterval: 50 * time.Millisecond}, nil)
	require.NoError(t, e.add(Job{Series: g, From: start, To: start.Add(time.Minute),
		Policy: Policy{TakeoverGrace: time.Millisecond},
		LeaseHandler: func(context.Context, *acquire.Lease) error {
			close(done)
			return nil
		}}))
	runUntilOneComplete(t, db, ctx, e, done, "the expired lease was not taken over")
}

// runUntilOneComplete starts e, waits for its handler to close done
// (failing with what if it does not within 30 s), then for the one slot to
// be COMPLETE, and stops e when the test ends.
func runUntilOneComplete(t *testing.T, db *pgtest.DB, ctx context.Context, e *engine, done <-chan struct{}, what string) {
	t.Helper()
	require.NoError(t, e.start(ctx))
	t.Cleanup(func() { require.NoError(t, e.stop(context.Background())) })
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal(what)
	}
	waitCompleted(t, db, 1, 10*time.Second)
}

// bulkKind tells the grouped materialization's insert and the single
// series' inserts from the rest.
func bulkKind(sql string) string {
	sql = strings.TrimSpace(sql)
	switch {
	case strings.HasPrefix(sql, "WITH want AS ("):
		return "many"
	case strings.Contains(sql, `.slot (name, "interval", slot_start, slot_end, status, message)`):
		return "one"
	}
	return "other"
}

// TestTickMaterializesGroupInOneStatement: the jobs of many series on one
// grid materialize each tick's newly due slots with one statement, not one
// transaction per series.
func TestTickMaterializesGroupInOneStatement(t *testing.T) {
	db := pgtest.New(t)
	tally := &sqlTally{by: map[string]int{}, tell: bulkKind}
	pool := tallyPool(t, db, tally)
	e := newEngine(pool, Options{Schema: db.Schema}, nil)
	const n = 40
	for i := range n {
		require.NoError(t, e.add(Job{Series: series(t, fmt.Sprintf("tick_%03d", i), "PT1S"),
			Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
	}
	require.Len(t, e.groups(), 1)
	startEngine(t, e)
	starts := func() int {
		return count(t, db, `SELECT count(DISTINCT slot_start) FROM {{schema}}.slot`)
	}
	// Settled once every series has its first slot (the catch-up at start
	// writes each series alone).
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(DISTINCT name) FROM {{schema}}.slot`) == n
	}, time.Minute, 5*time.Millisecond)
	before, first := tally.counts(), starts()
	require.Eventually(t, func() bool { return starts() >= first+3 }, time.Minute, 5*time.Millisecond)
	after, ticks := tally.counts(), starts()-first
	require.Equal(t, before["one"], after["one"], "inserts of one series over %d ticks", ticks)
	require.LessOrEqual(t, after["many"]-before["many"], ticks+1, "grouped inserts over %d ticks", ticks)
	require.Positive(t, after["many"]-before["many"])
	// Every series has every slot of those ticks, and they all run.
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) >= n*(ticks+1)
	}, time.Minute, 5*time.Millisecond)
	require.Zero(t, count(t, db, `SELECT count(*) FROM (SELECT slot_start FROM {{schema}}.slot GROUP BY slot_start
		HAVING count(*) <> $1 AND slot_start < (SELECT max(slot_start) FROM {{schema}}.slot)
			AND slot_start >= (SELECT max(first) FROM (SELECT min(slot_start) AS first FROM {{schema}}.slot GROUP BY name) AS f)) AS partial`, n),
		"a slot time after every series' first that some series lacks")
}

// TestPrepareIsConstantStatements: registering the series of many jobs and
// opening their queues takes a few statements, not some per job; a series
// registered with another grid is still refused.
func TestPrepareIsConstantStatements(t *testing.T) {
	db := pgtest.New(t)
	tally := &sqlTally{by: map[string]int{}, tell: func(string) string { return "all" }}
	pool := tallyPool(t, db, tally)
	ctx := context.Background()
	noop := func(context.Context, pgx.Tx, acquire.Slot) error { return nil }
	e := newEngine(pool, Options{Schema: db.Schema}, nil)
	const n = 80
	for i := range n {
		j := Job{Series: series(t, fmt.Sprintf("prep_%03d", i), "PT1M"), Handler: noop}
		if i%2 == 1 {
			j.From = minutesAgo(3)
		}
		require.NoError(t, e.add(j))
	}
	require.NoError(t, e.prepare(ctx))
	require.LessOrEqual(t, tally.counts()["all"], 6, "statements to prepare %d jobs", n)
	for _, j := range e.jobs {
		require.False(t, j.start.IsZero())
		require.NotNil(t, j.queue)
		require.NotNil(t, j.cov)
	}

	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	other, err := slot.NewSeries("prep_007", mustInterval("PT1M"), berlin, time.Time{})
	require.NoError(t, err)
	e = newEngine(pool, Options{Schema: db.Schema}, nil)
	require.NoError(t, e.add(Job{Series: series(t, "prep_new", "PT1M"), Handler: noop}))
	require.NoError(t, e.add(Job{Series: other, Handler: noop}))
	require.ErrorIs(t, e.prepare(ctx), seriesdb.ErrSeriesConflict)
}

// claimKind tells a claim (acquire's candidates) from other statements.
func claimKind(sql string) string {
	if strings.Contains(sql, "expired AS (") && strings.Contains(sql, "SKIP LOCKED") {
		return "claim"
	}
	return "other"
}

// TestLastSlotNeedsOneClaim: a job that took the last slot it materialized
// does not claim again to find nothing: many series with one slot each
// cost about one claim per slot, not two.
func TestLastSlotNeedsOneClaim(t *testing.T) {
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			db := pgtest.New(t)
			tally := &sqlTally{by: map[string]int{}, tell: claimKind}
			pool := tallyPool(t, db, tally)
			// One worker: several on one job with one slot would find
			// nothing but for one, whatever this change does.
			e := newEngine(pool, Options{Schema: db.Schema, PollInterval: time.Hour, Concurrency: 1}, nil)
			const n = 30
			from := minutesAgo(2)
			for i := range n {
				j := Job{Series: series(t, fmt.Sprintf("last_%03d", i), "PT1M"), From: from, To: from.Add(time.Minute)}
				if lease {
					j.LeaseHandler = func(context.Context, *acquire.Lease) error { return nil }
				} else {
					j.Handler = func(context.Context, pgx.Tx, acquire.Slot) error { return nil }
				}
				require.NoError(t, e.add(j))
			}
			startEngine(t, e)
			waitCompleted(t, db, n, time.Minute)
			waitIdle(t, e)
			require.Less(t, tally.counts()["claim"], n*3/2, "claims for %d slots", n)
		})
	}
}

// TestGroupInsertTakesWritersLock: a group's insert waits for the writers'
// lock of its series (the series row, which Compact, Materialize, Skip and
// Reopen's restore hold while they insert or delete slots), so that it
// cannot bring back a finished slot a compaction is deleting.
func TestGroupInsertTakesWritersLock(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	noop := func(context.Context, pgx.Tx, acquire.Slot) error { return nil }
	for _, name := range []string{"held_a", "held_b"} {
		require.NoError(t, e.add(Job{Series: series(t, name, "PT1M"), From: minutesAgo(5), Handler: noop}))
	}
	require.NoError(t, e.prepare(ctx))

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, sqlschema.Render(`SELECT FROM {{schema}}.series WHERE name = 'held_b' AND "interval" = 'PT1M' FOR NO KEY UPDATE`, db.Schema))
	require.NoError(t, err)
	var holder int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))

	done := make(chan error, 1)
	from := minutesAgo(3)
	go func() {
		done <- e.materializeMany(ctx, e.jobs[0].Series, span{from: from, to: from.Add(time.Minute)}, e.jobs)
	}()
	// Waits for the lock the open transaction holds, and has inserted
	// nothing meanwhile.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, holder).Scan(&waiting))
		return waiting
	}, 30*time.Second, time.Millisecond, "the group's insert did not wait for the series lock")
	require.Zero(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot`))
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE slot_start = $1`, from))
}
