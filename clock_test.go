package almanac

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// fakeClock is a Clock whose time moves only when the test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// offsetClock is the system clock shifted by a constant: a host whose clock
// is wrong.
type offsetClock struct{ by time.Duration }

func (c offsetClock) Now() time.Time                         { return time.Now().Add(c.by) }
func (c offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// dbNow reads the database clock.
func dbNow(t *testing.T, db *pgtest.DB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// waitForDB waits until the database clock reaches at, on the server.
func waitForDB(t *testing.T, db *pgtest.DB, at time.Time) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `SELECT pg_sleep_until($1)`, at)
	require.NoError(t, err)
}

// runEngine runs e in the background until the returned stop is called.
func runEngine(t *testing.T, e *engine) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.serve(ctx) }()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}

// TestDueOnTheDatabaseClock: what is due is decided by the database clock;
// the scheduler's own clock only times its waits. Workers whose clocks are
// an hour ahead or an hour behind run every slot once it is due on the
// database clock: nothing early, nothing missed.
func TestDueOnTheDatabaseClock(t *testing.T) {
	const lag = 300 * time.Millisecond
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel() // each waits seconds of the database clock, in a schema of its own
			db := pgtest.New(t)
			g := series(t, "skewed", "PT1S")
			first, err := g.Floor(dbNow(t, db))
			require.NoError(t, err)
			e := newEngine(db.Pool, Options{Schema: db.Schema, Clock: offsetClock{skew}, PollInterval: time.Hour}, nil)
			e.sweep = 24 * time.Hour
			require.NoError(t, e.add(Job{Series: g, Policy: Policy{Lag: lag}, From: first.Start,
				Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
			stop := runEngine(t, e)
			defer stop()

			// Every slot due by checkpoint runs: nothing is missed.
			checkpoint := first.Start.Add(3*time.Second + lag)
			waitForDB(t, db, checkpoint)
			require.Eventually(t, func() bool {
				return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND slot_end + $1 * interval '1 microsecond' <= $2`,
					lag.Microseconds(), checkpoint) == 3
			}, time.Minute, 20*time.Millisecond, "every slot due on the database clock runs")
			// Nothing early: no slot ran, or even exists, before it was due.
			require.Zero(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE completed_at < slot_end + $1 * interval '1 microsecond'`, lag.Microseconds()))
			require.Zero(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE slot_end + $1 * interval '1 microsecond' > clock_timestamp()`, lag.Microseconds()))
		})
	}
}

// TestTriggerSleepsOnItsClock drives a running scheduler with a fake clock:
// the scheduler sleeps on it between triggers, so slots that became due on
// the database clock meanwhile wait for the trigger, and run as soon as the
// clock moves; the fake clock's date, years off, does not matter.
//
// The job starts five slots back, so its start-up catch-up has work whose
// end the test can see: only then is the scheduler known to be asleep,
// however long the start took on a busy machine.
func TestTriggerSleepsOnItsClock(t *testing.T) {
	db := pgtest.New(t)
	g := series(t, "clocked", "PT1S")
	const lag = 200 * time.Millisecond
	const behind = 5
	now, err := g.Floor(dbNow(t, db))
	require.NoError(t, err)
	clock := &fakeClock{now: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEngine(db.Pool, Options{Schema: db.Schema, Clock: clock, PollInterval: time.Hour}, nil)
	e.sweep = 24 * time.Hour
	require.NoError(t, e.add(Job{Series: g, Policy: Policy{Lag: lag}, From: now.Start.Add(-behind * time.Second),
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
	stop := runEngine(t, e)
	defer stop()

	// The start-up catch-up ran (one statement made its slots, the due
	// ones of the five): every slot it made is COMPLETE.
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) > 0 &&
			count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status <> 'COMPLETE'`) == 0
	}, time.Minute, 10*time.Millisecond, "the catch-up at start runs")
	started := count(t, db, `SELECT count(*) FROM {{schema}}.slot`)

	// Asleep: two more slots become due on the database clock, and nothing
	// is even materialized until the scheduler's clock moves.
	waitForDB(t, db, dbNow(t, db).Add(2*time.Second+lag))
	require.Equal(t, started, count(t, db, `SELECT count(*) FROM {{schema}}.slot`), "nothing is materialized while the scheduler sleeps")
	clock.Advance(time.Hour)
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) >= started+2
	}, time.Minute, 10*time.Millisecond, "the due slots run once the trigger fires")
	require.Zero(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE completed_at < slot_end + $1 * interval '1 microsecond'`, lag.Microseconds()))
}
