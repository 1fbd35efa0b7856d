package almanac_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestCoverage is the project's headline test: every slot of a range is
// processed exactly once while instances in every mode crash, backends are
// killed, a backfill re-opens a sub-range in flight, and a stale lease
// holder tries to write after losing its slot.
//
// Exactly once is checked against the database's own record: a trigger logs
// every transition of a slot to COMPLETE (with the fence that completed it)
// and every re-opening. Each completion must have exactly one result row
// carrying its fence, no result row may lack a completion, and every slot
// must have been completed once plus once per re-opening.
func TestCoverage(t *testing.T) {
	const slots = 2400
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(t, err)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(sql, db.Schema), args...).Scan(&n))
		return n
	}
	exec(`CREATE TABLE {{schema}}.result (slot_start timestamptz NOT NULL, fence bigint NOT NULL, mode text NOT NULL)`)
	exec(`CREATE TABLE {{schema}}.completion (slot_start timestamptz NOT NULL, fence bigint NOT NULL)`)
	exec(`CREATE TABLE {{schema}}.reopening (slot_start timestamptz NOT NULL)`)
	exec(`CREATE FUNCTION {{schema}}.log_transition() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.status = 'COMPLETE' AND OLD.status <> 'COMPLETE' THEN
				INSERT INTO {{schema}}.completion VALUES (NEW.slot_start, NEW.fence);
			ELSIF OLD.status = 'COMPLETE' AND NEW.status = 'AVAILABLE' THEN
				INSERT INTO {{schema}}.reopening VALUES (NEW.slot_start);
			END IF;
			RETURN NEW;
		END $$`)
	exec(`CREATE TRIGGER log_transition AFTER UPDATE OF status ON {{schema}}.slot
		FOR EACH ROW EXECUTE FUNCTION {{schema}}.log_transition()`)

	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 40
	cfg.ConnConfig.RuntimeParams["application_name"] = "almanac-coverage-test"
	acquire.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	setup, err := almanac.New(pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	series, err := setup.Series(ctx, "report", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(slots * time.Minute)
	insert := sqlschema.Render(`INSERT INTO {{schema}}.result (slot_start, fence, mode) VALUES ($1, $2, $3)`, db.Schema)

	// Handlers work a little, so crashes land mid-handler.
	work := func(ctx context.Context) error {
		select {
		case <-time.After(time.Duration(rand.IntN(3)) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	locked := func(mode string) almanac.Handler {
		return func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			if err := work(ctx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insert, s.Start, s.Fence, mode)
			return err
		}
	}
	leasedOn := func(ctx context.Context, pool *pgxpool.Pool, l *almanac.Lease) error {
		if err := work(ctx); err != nil {
			return err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
		if err := l.CompleteTx(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insert, l.Start, l.Fence, "lease"); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	leased := func(ctx context.Context, l *almanac.Lease) error { return leasedOn(ctx, pool, l) }
	jobs := []almanac.Job{
		// Expired leases are taken over at once (no grace), so that the
		// stale holder below is overtaken within the test.
		{Series: series, From: from, To: to, Handler: locked("locked"), Policy: almanac.Policy{TakeoverGrace: -1}},
		{Series: series, From: from, To: to, Batch: 10, Handler: locked("batch"),
			Policy: almanac.Policy{TakeoverGrace: -1}},
		{Series: series, From: from, To: to, LeaseHandler: leased,
			Policy: almanac.Policy{LeaseTTL: 2 * time.Second, TakeoverGrace: -1}},
	}
	// instance starts one instance of job i: a Client with 8 workers.
	instance := func(i int) (*almanac.Client, error) {
		c, err := almanac.New(pool, almanac.Options{Schema: db.Schema, Concurrency: 8,
			PollInterval: 200 * time.Millisecond, ShutdownTimeout: 20 * time.Millisecond})
		if err == nil {
			err = c.Register(jobs[i])
		}
		if err == nil {
			err = c.Start(ctx)
		}
		return c, err
	}
	var mu sync.Mutex
	instances := make([]*almanac.Client, 3)
	for i := range instances {
		instances[i], err = instance(i)
		require.NoError(t, err)
	}
	t.Cleanup(func() { // after the faults stopped (cleanups run last first)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range instances {
			_ = c.Stop(context.Background())
		}
	})

	// Faults, until every slot is done. The goroutines report failures
	// with Errorf (FailNow belongs to the test's goroutine) and are always
	// stopped before the test returns, failed or not.
	var crashes, kills, stale atomic.Int64
	done := make(chan struct{})
	var faults sync.WaitGroup
	stopFaults := sync.OnceFunc(func() { close(done); faults.Wait() })
	t.Cleanup(stopFaults)
	faults.Add(3)
	go func() { // crash an instance (its running handlers are cancelled), start it again
		defer faults.Done()
		for i := 0; ; i = (i + 1) % 3 {
			select {
			case <-done:
				return
			case <-time.After(150 * time.Millisecond):
			}
			mu.Lock()
			err := instances[i].Stop(ctx)
			if err == nil {
				instances[i], err = instance(i)
			}
			mu.Unlock()
			if err != nil {
				t.Errorf("crash and restart instance %d: %v", i, err)
				return
			}
			crashes.Add(1)
		}
	}()
	go func() { // terminate backends of workers
		defer faults.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (
				SELECT pid FROM pg_stat_activity WHERE application_name = 'almanac-coverage-test'
				AND state LIKE 'idle in transaction%' ORDER BY random() LIMIT 1) victims`).Scan(&n)
			if err != nil {
				t.Errorf("terminate a backend: %v", err)
				return
			}
			kills.Add(int64(n))
		}
	}()
	go func() { // a stale lease holder: claims, stalls past its lease, writes after losing the slot
		defer faults.Done()
		q, err := acquire.New(ctx, pool, series, acquire.Options{Schema: db.Schema, Policy: acquire.Policy{LeaseTTL: 100 * time.Millisecond}})
		if err != nil {
			t.Errorf("stale holder's queue: %v", err)
			return
		}
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			leases, err := q.Claim(ctx, 1)
			if err != nil {
				t.Errorf("stale holder's claim: %v", err)
				return
			}
			if len(leases) == 0 {
				continue
			}
			l := leases[0]
			// Stall until someone else has taken the slot over and finished it.
			for {
				var taken int
				err := db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.slot
					WHERE slot_start = $1 AND fence <> $2 AND status = 'COMPLETE'`, db.Schema), l.Start, l.Fence).Scan(&taken)
				if err != nil {
					t.Errorf("stale holder's wait: %v", err)
					return
				}
				if taken > 0 {
					break
				}
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			// (On the harness's pool, which the backend killer leaves alone.)
			if err := leasedOn(ctx, db.Pool, l); !errors.Is(err, almanac.ErrLeaseLost) {
				t.Errorf("a stale holder's write must be refused with ErrLeaseLost; got %v", err)
				return
			}
			stale.Add(1)
		}
	}()

	// A backfill re-opens a sub-range once part of it is done. (The waits'
	// bounds only stop a hung test: they are no speed bar, and a loaded
	// machine works through the faults slowly.)
	backfillFrom, backfillTo := from.Add(600*time.Minute), from.Add(900*time.Minute)
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND slot_start >= $1 AND slot_start < $2`,
			backfillFrom, backfillTo) > 100
	}, 4*time.Minute, 10*time.Millisecond, "a third of the backfill's range completes")
	reopened, err := setup.Reopen(ctx, series, backfillFrom, backfillTo, almanac.WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	require.Positive(t, reopened.Changed)

	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) == slots
	}, 4*time.Minute, 50*time.Millisecond, "every slot completes")
	stopFaults()
	for _, c := range instances {
		require.NoError(t, c.Stop(ctx))
	}

	// Every slot COMPLETE, none missing, none outside the range.
	status, err := setup.Status(ctx, series, from, to)
	require.NoError(t, err)
	require.Equal(t, int64(slots), status.Complete)
	gaps, err := setup.Gaps(ctx, series, from, to)
	require.NoError(t, err)
	require.Empty(t, gaps)
	require.Equal(t, slots, count(`SELECT count(*) FROM {{schema}}.slot`))

	// Exactly one result per completion, with its fence; none without one.
	require.Zero(t, count(`SELECT count(*) FROM (
		SELECT slot_start, fence, count(*) FROM {{schema}}.result GROUP BY 1, 2 HAVING count(*) <> 1) dup`), "duplicate results")
	require.Zero(t, count(`SELECT count(*) FROM {{schema}}.completion c
		LEFT JOIN {{schema}}.result r USING (slot_start, fence) WHERE r.slot_start IS NULL`), "a completion without its result")
	require.Zero(t, count(`SELECT count(*) FROM {{schema}}.result r
		LEFT JOIN {{schema}}.completion c USING (slot_start, fence) WHERE c.slot_start IS NULL`), "a result that did not commit with a completion")
	// Once per generation: one completion, plus one per re-opening.
	require.Zero(t, count(`SELECT count(*) FROM (
		SELECT slot_start, count(*) AS done FROM {{schema}}.completion GROUP BY 1) c
		LEFT JOIN (SELECT slot_start, count(*) AS again FROM {{schema}}.reopening GROUP BY 1) r USING (slot_start)
		WHERE c.done <> 1 + coalesce(r.again, 0)`), "a slot completed more or less often than its generations")
	require.Equal(t, int(reopened.Changed), count(`SELECT count(*) FROM {{schema}}.reopening`))
	require.Equal(t, slots+int(reopened.Changed), count(`SELECT count(*) FROM {{schema}}.result`))

	modes := map[string]int{}
	rows, err := db.Pool.Query(ctx, sqlschema.Render(`SELECT mode, count(*) FROM {{schema}}.result GROUP BY mode`, db.Schema))
	require.NoError(t, err)
	var mode string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&mode, &n}, func() error { modes[mode] = n; return nil })
	require.NoError(t, err)
	for _, m := range []string{"locked", "batch", "lease"} {
		require.Positive(t, modes[m], "mode %s took part", m)
	}
	require.Positive(t, crashes.Load())
	require.Positive(t, stale.Load(), "a stale write was attempted and refused")
	t.Logf("slots %d, re-opened %d, results %v, instance crashes %d, backends killed %d, stale writes refused %d",
		slots, reopened.Changed, modes, crashes.Load(), kills.Load(), stale.Load())
}
