package acquire

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

func fixedRetry(d time.Duration) RetryPolicy {
	return func(int, error) (time.Duration, bool) { return d, true }
}

func TestLockedCompleteCommitsWithEffects(t *testing.T) {
	f := newFixture(t, 3)
	q := f.queue(Options{})
	ctx := context.Background()
	res, ok, err := q.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		require.Equal(t, "report 2026-01-01T00:00:00Z/PT1M", s.Key())
		require.Equal(t, 1, s.Attempt)
		require.False(t, s.TookOver)
		require.Positive(t, s.Fence)
		return writeEffect(ctx, tx, f.schema, s, "locked")
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Completed, res.Outcome)
	r := f.row(f.slotStart(0))
	require.Equal(t, "COMPLETE", r.Status)
	require.Equal(t, res.Slot.Fence, r.Fence)
	require.Equal(t, 1, r.Attempts)
	require.NotNil(t, r.CompletedAt)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE slot_start = $1 AND fence = $2`, f.slotStart(0), r.Fence))

	// Oldest first: the next run takes the next slot, never the completed one.
	res, ok, err = q.Run(ctx, func(context.Context, pgx.Tx, Slot) error { return nil })
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, res.Slot.Start.Equal(f.slotStart(1)))
	require.Greater(t, res.Slot.Fence, r.Fence, "fences grow")
}

func TestLockedNothingToDo(t *testing.T) {
	f := newFixture(t, 0)
	_, ok, err := f.queue(Options{}).Run(context.Background(), func(context.Context, pgx.Tx, Slot) error {
		t.Fatal("no slot, no call")
		return nil
	})
	require.NoError(t, err)
	require.False(t, ok)
}

func TestLockedOrderAndRange(t *testing.T) {
	f := newFixture(t, 10)
	ctx := context.Background()
	noop := func(context.Context, pgx.Tx, Slot) error { return nil }
	newest := f.queue(Options{Policy: Policy{NewestFirst: true}})
	res, _, err := newest.Run(ctx, noop)
	require.NoError(t, err)
	require.True(t, res.Slot.Start.Equal(f.slotStart(9)))
	// A batch's outcomes are written by position in arrays sorted by
	// start: each must reach its own slot whatever the batch's order.
	results, err := newest.RunBatch(ctx, 3, func(_ context.Context, _ pgx.Tx, s Slot) error {
		if s.Start.Equal(f.slotStart(7)) {
			return Skip("the middle one")
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, results, 3)
	for i, want := range []string{"COMPLETE", "SKIP", "COMPLETE"} {
		start := f.slotStart(8 - i)
		require.True(t, results[i].Slot.Start.Equal(start), "result %d is of %s", i, results[i].Slot.Start)
		require.Equal(t, want, f.row(start).Status, "slot %s", start)
	}

	ranged := f.queue(Options{From: f.slotStart(4), To: f.slotStart(6)})
	results, err = ranged.RunBatch(ctx, 10, noop)
	require.NoError(t, err)
	require.Len(t, results, 2)
	require.True(t, results[0].Slot.Start.Equal(f.slotStart(4)))
	require.True(t, results[1].Slot.Start.Equal(f.slotStart(5)))
	_, ok, err := ranged.Run(ctx, noop)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestLockedOutcomes(t *testing.T) {
	f := newFixture(t, 6)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{Retry: fixedRetry(time.Hour), MaxAttempts: 2}})
	type checkpoint struct{ Step int }

	results, err := q.RunBatch(ctx, 6, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		if err := writeEffect(ctx, tx, f.schema, s, "batch"); err != nil {
			return err
		}
		switch s.Start.Minute() {
		case 0:
			return nil
		case 1:
			return Skip("holiday")
		case 2:
			return Snooze(time.Hour).WithData(checkpoint{Step: 2})
		case 3:
			return errors.New("remote said no")
		case 4:
			panic("boom")
		default:
			_, err := tx.Exec(ctx, "SELECT 1/0") // swallowed: the outcome cannot commit
			_ = err
			return nil
		}
	})
	require.NoError(t, err)
	require.Len(t, results, 6)
	want := []Outcome{Completed, Skipped, Snoozed, Failed, Failed, Failed}
	for i, r := range results {
		require.Equal(t, want[i], r.Outcome, "slot %d: %v", i, r.Err)
	}
	require.Contains(t, results[4].Err.Error(), "panic: boom")

	// Effects commit with COMPLETE, SKIP and snooze, and vanish with failures.
	for i, kept := range []bool{true, true, true, false, false, false} {
		require.Equal(t, map[bool]int{true: 1, false: 0}[kept],
			f.count(`SELECT count(*) FROM {{schema}}.effect WHERE slot_start = $1`, f.slotStart(i)), "slot %d", i)
	}

	r := f.row(f.slotStart(1))
	require.Equal(t, "SKIP", r.Status)
	require.Equal(t, "holiday", *r.Message)

	r = f.row(f.slotStart(2))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Equal(t, 0, r.FailCount, "a snooze is not a failure")
	require.JSONEq(t, `{"Step":2}`, string(r.Data))
	require.InDelta(t, time.Hour.Seconds(), r.FromNow.Seconds(), 5)

	r = f.row(f.slotStart(3))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Equal(t, 1, r.FailCount)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, "remote said no", *r.Message)
	require.InDelta(t, time.Hour.Seconds(), r.FromNow.Seconds(), 5, "backoff on the database clock")

	r = f.row(f.slotStart(5))
	require.Contains(t, *r.Message, "failed statement")

	// A second failure reaches MaxAttempts: the slot is parked, not lost.
	f.exec(`UPDATE {{schema}}.slot SET not_before = NULL WHERE slot_start = $1`, f.slotStart(3))
	res, ok, err := q.Run(ctx, func(context.Context, pgx.Tx, Slot) error { return errors.New("still no") })
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Parked, res.Outcome)
	r = f.row(f.slotStart(3))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Equal(t, 2, r.FailCount)
	require.True(t, r.Parked, "not_before is infinity")
	require.Contains(t, *r.Message, "gave up after 2 failures: still no")
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE not_before = 'infinity'`))

	// The snoozed slot comes back with its checkpoint.
	f.exec(`UPDATE {{schema}}.slot SET not_before = NULL WHERE slot_start = $1`, f.slotStart(2))
	_, ok, err = q.Run(ctx, func(_ context.Context, _ pgx.Tx, s Slot) error {
		require.JSONEq(t, `{"Step":2}`, string(s.Data))
		require.Equal(t, 2, s.Attempt)
		return nil
	})
	require.NoError(t, err)
	require.True(t, ok)
}

func TestLockedTxIsManaged(t *testing.T) {
	f := newFixture(t, 1)
	res, _, err := f.queue(Options{}).Run(context.Background(), func(ctx context.Context, tx pgx.Tx, s Slot) error {
		require.ErrorIs(t, tx.Commit(ctx), ErrTxManaged)
		require.ErrorIs(t, tx.Rollback(ctx), ErrTxManaged)
		// The handler's own savepoints work as usual.
		nested, err := tx.Begin(ctx)
		require.NoError(t, err)
		_, err = nested.Exec(ctx, effect(f.schema), s.Start, s.Fence, "discarded")
		require.NoError(t, err)
		require.NoError(t, nested.Rollback(ctx))
		return writeEffect(ctx, tx, f.schema, s, "kept")
	})
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE mode = 'kept'`))
}

// TestLockedCancelledContext: a worker shutting down mid-handler records
// nothing; the slot is acquirable again at once, with no attempt counted.
func TestLockedCancelledContext(t *testing.T) {
	f := newFixture(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	results, err := f.queue(Options{}).RunBatch(ctx, 2, func(hctx context.Context, tx pgx.Tx, s Slot) error {
		if err := writeEffect(hctx, tx, f.schema, s, "locked"); err != nil {
			return err
		}
		if s.Start.Equal(f.slotStart(0)) {
			return nil // finished before the shutdown: committed
		}
		cancel()
		<-hctx.Done()
		return hctx.Err()
	})
	require.NoError(t, err)
	require.Len(t, results, 2)
	require.Equal(t, Completed, results[0].Outcome)
	require.Equal(t, Abandoned, results[1].Outcome)
	require.Equal(t, "COMPLETE", f.row(f.slotStart(0)).Status)
	r := f.row(f.slotStart(1))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Zero(t, r.Attempts)
	require.Zero(t, r.FailCount)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
}

// TestLockedMaxWork: a handler that overruns MaxWork fails with a clear
// message and its writes are rolled back, whether cancelling its statement
// keeps the connection (ConfigurePool) or closes it (pgx's default).
func TestLockedMaxWork(t *testing.T) {
	for _, configured := range []bool{false, true} {
		t.Run(fmt.Sprintf("ConfigurePool=%v", configured), func(t *testing.T) {
			f := newFixture(t, 1)
			cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
			require.NoError(t, err)
			if configured {
				ConfigurePool(cfg)
			}
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			defer pool.Close()
			q := f.queueOn(pool, Options{Policy: Policy{MaxWork: 200 * time.Millisecond, Retry: fixedRetry(time.Minute)}})
			res, _, err := q.Run(context.Background(), func(ctx context.Context, tx pgx.Tx, s Slot) error {
				if err := writeEffect(ctx, tx, f.schema, s, "locked"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "SELECT pg_sleep(5)")
				return err
			})
			require.NoError(t, err)
			require.Equal(t, Failed, res.Outcome)
			require.Contains(t, res.Err.Error(), "MaxWork")
			r := f.row(f.slotStart(0))
			require.Contains(t, *r.Message, "MaxWork")
			require.Equal(t, 1, r.FailCount)
			require.Equal(t, 1, r.Attempts)
			require.Equal(t, res.Slot.Fence, r.Fence)
			require.InDelta(t, time.Minute.Seconds(), r.FromNow.Seconds(), 5)
			require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.effect`))
		})
	}
}

// TestLockedBackendTerminated: a holder whose backend is killed mid-handler
// cannot commit; another worker redoes the slot once.
func TestLockedBackendTerminated(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	q := f.queue(Options{})
	inHandler := make(chan int)
	release := make(chan struct{})
	var first Result
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, _, firstErr = q.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
			if err := writeEffect(ctx, tx, f.schema, s, "killed"); err != nil {
				return err
			}
			var pid int
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			inHandler <- pid
			<-release
			return nil
		})
	}()
	var pid int
	select {
	case pid = <-inHandler:
	case <-done:
		t.Fatalf("the handler never ran: %v", firstErr)
	}
	var killed bool
	// Wait until the backend is gone, as a real kill would be complete
	// before anyone looks again.
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&killed))
	require.True(t, killed)
	close(release)
	<-done
	require.Error(t, firstErr)
	require.Equal(t, Abandoned, first.Outcome)

	res, ok, err := q.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		return writeEffect(ctx, tx, f.schema, s, "redo")
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Completed, res.Outcome)
	require.Greater(t, res.Slot.Fence, first.Slot.Fence)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE mode = 'redo'`))
}

// TestLockedDeadManSwitch: a holder that stops pinging (as a frozen
// process would) loses its session after DeadMan; the slot is redone by
// another worker and the frozen holder's late commit fails.
func TestLockedDeadManSwitch(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	frozen := f.queue(Options{Policy: Policy{DeadMan: time.Second}})
	frozen.testNoPing = true
	inHandler := make(chan struct{})
	wake := make(chan struct{})
	done := make(chan Result)
	go func() {
		res, _, _ := frozen.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
			if err := writeEffect(ctx, tx, f.schema, s, "frozen"); err != nil {
				return err
			}
			close(inHandler)
			<-wake
			return nil
		})
		done <- res
	}()
	select {
	case <-inHandler:
	case res := <-done:
		t.Fatalf("the handler never ran: %v", res.Err)
	}
	healthy := f.queue(Options{})
	var res Result
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var ok bool
		var err error
		res, ok, err = healthy.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
			return writeEffect(ctx, tx, f.schema, s, "healthy")
		})
		require.NoError(c, err)
		require.True(c, ok)
	}, 10*time.Second, 50*time.Millisecond, "the dead-man switch never released the slot")
	require.Equal(t, Completed, res.Outcome)
	close(wake)
	late := <-done
	require.Equal(t, Abandoned, late.Outcome, "the frozen holder's commit fails")
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE mode = 'healthy'`))
}

// TestLockedPingsKeepAnIdleHandlerAlive: a handler that sends nothing for
// longer than DeadMan keeps its session, because the worker pings it; the
// session's idle-in-transaction timeout (DeadMan) would end it otherwise.
// The handler stays idle until the database clock is 2.5 DeadMan past the
// moment it read it, which the test waits for on the server.
func TestLockedPingsKeepAnIdleHandlerAlive(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	started := make(chan time.Time, 1)
	release := make(chan struct{})
	go func() {
		var at time.Time
		select {
		case at = <-started:
		case <-time.After(30 * time.Second):
			close(release) // the handler never started; Run's result says why
			return
		}
		_, err := f.db.Pool.Exec(ctx, `SELECT pg_sleep_until($1::timestamptz + interval '2.5 seconds')`, at)
		if err != nil {
			t.Error(err)
		}
		close(release)
	}()
	res, _, err := f.queue(Options{Policy: Policy{DeadMan: time.Second}}).Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		var at time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			return err
		}
		started <- at
		<-release // idle: no statement on the session
		return writeEffect(ctx, tx, f.schema, s, "idle")
	})
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome, "%v", res.Err)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE mode = 'idle'`))
}

// TestLockedPingNoticesALostSession: when the held session is terminated
// while the handler waits, the next ping fails and the handler's context
// ends with ErrConnectionLost; nothing is recorded and the slot is free.
func TestLockedPingNoticesALostSession(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	pid := make(chan int32, 1)
	done := make(chan Result, 1)
	go func() {
		res, _, _ := f.queue(Options{Policy: Policy{DeadMan: time.Second}}).Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
			var p int32
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
				return err
			}
			pid <- p
			<-ctx.Done()
			return context.Cause(ctx)
		})
		done <- res
	}()
	f.exec(`SELECT pg_terminate_backend($1)`, <-pid)
	select {
	case res := <-done:
		require.Equal(t, Abandoned, res.Outcome)
		require.ErrorIs(t, res.Err, ErrConnectionLost)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context never ended after its session was terminated")
	}
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE'`))
}

// TestLockedPingerAndHandlerShareTheConnection runs many statements while the
// pinger is busy, under the race detector.
func TestLockedPingerAndHandlerShareTheConnection(t *testing.T) {
	f := newFixture(t, 1)
	res, _, err := f.queue(Options{Policy: Policy{DeadMan: time.Second}}).Run(context.Background(), func(ctx context.Context, tx pgx.Tx, s Slot) error {
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			rows, err := tx.Query(ctx, "SELECT generate_series(1, 10)")
			if err != nil {
				return err
			}
			if _, err := pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
				return err
			}
			var one int
			if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
		return writeEffect(ctx, tx, f.schema, s, "locked")
	})
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome, "%v", res.Err)
}

func TestPoolTooSmall(t *testing.T) {
	f := newFixture(t, 0)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = New(context.Background(), pool, f.grid, Options{Schema: f.schema})
	require.ErrorIs(t, err, ErrPoolTooSmall)
	require.Contains(t, err.Error(), "at least 3")
}

// TestHeldConnectionsAreBudgeted: with every holdable connection held by
// locked-mode handlers, lease writes and the handlers' own pool queries
// still get connections.
func TestHeldConnectionsAreBudgeted(t *testing.T) {
	f := newFixture(t, 20)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	q := f.queueOn(pool, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	handled := 0
	for range 8 { // more workers than holdable connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, ok, err := q.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
					var n int
					// The handler uses the pool too: it must not deadlock.
					if err := pool.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
						return err
					}
					return writeEffect(ctx, tx, f.schema, s, "locked")
				})
				require.NoError(t, err)
				if !ok {
					return
				}
				mu.Lock()
				handled++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "no deadlock")
	require.Equal(t, 20, handled)
}

// TestHostileRoleSettings: a role whose sessions default to a 100 ms
// statement timeout, a 1 s idle-in-transaction timeout and serializable
// isolation cannot break acquisition.
func TestHostileRoleSettings(t *testing.T) {
	f := newFixture(t, 40)
	ctx := context.Background()
	role := "hostile_" + strings.TrimPrefix(f.schema, "almanac_test_")
	admin := f.db.Pool
	for _, sql := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, role),
		fmt.Sprintf(`ALTER ROLE %s SET statement_timeout = '100ms'`, role),
		fmt.Sprintf(`ALTER ROLE %s SET idle_in_transaction_session_timeout = '1s'`, role),
		fmt.Sprintf(`ALTER ROLE %s SET default_transaction_isolation = 'serializable'`, role),
		fmt.Sprintf(`ALTER ROLE %s SET lock_timeout = '10ms'`, role),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, f.schema, role),
		fmt.Sprintf(`GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s`, f.schema, role),
		fmt.Sprintf(`GRANT ALL ON ALL SEQUENCES IN SCHEMA %s TO %s`, f.schema, role),
	} {
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	var isolation string
	require.NoError(t, pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&isolation))
	require.Equal(t, "serializable", isolation, "the role's settings are in effect")

	locked := f.queueOn(pool, Options{})
	// Idle 1.5 s in the transaction (waiting on the database clock, in
	// another session) and run a 300 ms statement: both would be fatal under
	// the role's defaults.
	res, ok, err := locked.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		var at time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			return err
		}
		if _, err := f.db.Pool.Exec(ctx, `SELECT pg_sleep_until($1::timestamptz + interval '1.5 seconds')`, at); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.3)"); err != nil {
			return err
		}
		return writeEffect(ctx, tx, f.schema, s, "hostile")
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Completed, res.Outcome, "%v", res.Err)

	// Concurrent claims and completions under serializable defaults.
	leased := f.queueOn(pool, Options{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				leases, err := leased.Claim(ctx, 3)
				require.NoError(t, err)
				if len(leases) == 0 {
					return
				}
				lost, err := leased.CompleteMany(ctx, leases)
				require.NoError(t, err)
				require.Empty(t, lost)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 40, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
}

func TestExponentialRetry(t *testing.T) {
	p := Exponential(time.Second, time.Minute, 0)
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
		d, retry := p(failures, nil)
		require.True(t, retry)
		require.Equal(t, want, d, "after %d failures", failures)
	}
	jittered := Exponential(time.Second, time.Hour, 0.2)
	for range 100 {
		d, _ := jittered(3, nil)
		require.GreaterOrEqual(t, d, 3200*time.Millisecond)
		require.LessOrEqual(t, d, 4800*time.Millisecond)
	}
	d, _ := DefaultRetry(1, nil)
	require.InDelta(t, time.Second, d, float64(200*time.Millisecond))
}

// TestBudgetsFollowPools: a pool's connection budget goes away with the pool.
func TestBudgetsFollowPools(t *testing.T) {
	f := newFixture(t, 0)
	var key weak.Pointer[pgxpool.Pool]
	func() {
		pool, err := pgxpool.New(context.Background(), pgtest.URL(t))
		require.NoError(t, err)
		f.queueOn(pool, Options{})
		key = weak.Make(pool)
		_, ok := budgets.Load(key)
		require.True(t, ok)
		pool.Close()
	}()
	require.Eventually(t, func() bool {
		runtime.GC()
		_, ok := budgets.Load(key)
		return !ok
	}, 5*time.Second, 10*time.Millisecond)
}

// TestSeriesMaxAttempts: a series' max_attempts, set in the series table by
// any tool, parks its slots for workers that set no limit of their own.
func TestSeriesMaxAttempts(t *testing.T) {
	f := newFixture(t, 1)
	f.exec(`UPDATE {{schema}}.series SET max_attempts = 1`)
	res, _, err := f.queue(Options{}).Run(context.Background(), func(context.Context, pgx.Tx, Slot) error {
		return errors.New("no")
	})
	require.NoError(t, err)
	require.Equal(t, Parked, res.Outcome)
	require.True(t, f.row(f.slotStart(0)).Parked)
}

// TestTimeoutRecordedOutOfBand: the failure of a locked-mode run that
// overran MaxWork and lost its connection is recorded afterwards only if
// the slot is still acquirable: not over a lease renewed meanwhile.
func TestTimeoutRecordedOutOfBand(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{Retry: fixedRetry(time.Hour)}})
	leases, err := f.queue(Options{Policy: Policy{LeaseTTL: time.Minute}}).Claim(ctx, 1)
	require.NoError(t, err)
	live := leases[0]
	timedOut := func(start time.Time, heldFence int64) Result {
		s := Slot{Name: "report", Fence: heldFence + 1000, Attempt: 1, heldFence: heldFence}
		s.Start = start
		return Result{Slot: s, Outcome: Failed, Err: errors.New("overran"), Delay: time.Hour, timedOut: true}
	}
	results, err := q.recordOutOfBand(ctx, []Result{timedOut(live.Start, live.Fence), timedOut(f.slotStart(1), 0)}, ErrConnectionLost)
	require.ErrorIs(t, err, ErrConnectionLost)
	require.Equal(t, Abandoned, results[0].Outcome, "a live lease is left alone")
	require.Equal(t, Failed, results[1].Outcome, "an acquirable slot gets its failure")
	r := f.row(live.Start)
	require.Equal(t, "ACQUIRED", r.Status)
	require.Equal(t, live.Fence, r.Fence)
	r = f.row(f.slotStart(1))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Equal(t, 1, r.FailCount)
	require.Equal(t, "overran", *r.Message)
	require.NoError(t, live.Complete(ctx), "the lease is still its holder's")
}

// TestBatchWriteRefusesOutcomesOutOfOrder: the write of a batch's outcomes
// finds each slot's values by its position among the starts in order.
// Given outcomes out of order it finds only some of its slots, and the
// batch fails, so that its transaction rolls back, rather than commit the
// handlers' work and leave the other slots to run again.
func TestBatchWriteRefusesOutcomesOutOfOrder(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	q := f.queue(Options{})
	var results []Result
	for _, i := range []int{2, 0, 1} {
		s := Slot{Fence: int64(10 + i), Generation: 1, Attempt: 1}
		s.Slot = slot.Slot{Start: f.slotStart(i), End: f.slotStart(i + 1), Interval: f.grid.Interval()}
		results = append(results, Result{Slot: s, Outcome: Completed})
	}
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()

	_, err = tx.Exec(ctx, "SAVEPOINT unsorted")
	require.NoError(t, err)
	unsorted := &pgx.Batch{}
	require.NoError(t, q.finishSorted(unsorted, results))
	require.ErrorIs(t, sendOutcomes(ctx, tx, unsorted), errOutcomesMissing)
	_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT unsorted")
	require.NoError(t, err)

	require.NoError(t, q.finish(ctx, tx, results), "finish sorts them")
	var done int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+f.schema+".slot WHERE status = 'COMPLETE' AND fence >= 10").Scan(&done))
	require.Equal(t, 3, done)
}
