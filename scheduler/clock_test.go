package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/pgtest"
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

// TestTriggerWithInjectedClock drives a running scheduler with a fake clock:
// each five-minute window is materialized and run one minute after it ends,
// and not before, without waiting for real minutes.
func TestTriggerWithInjectedClock(t *testing.T) {
	db := pgtest.New(t)
	g := series(t, "clocked", "PT5M")
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start.Add(6 * time.Minute)} // 10:06: [10:00, 10:05) is due
	var mu sync.Mutex
	var ran []string
	s := New(db.Pool, Options{Schema: db.Schema, Clock: clock, PollInterval: time.Hour, SweepInterval: 24 * time.Hour})
	require.NoError(t, s.Add(Job{Series: g, Lag: time.Minute, Start: start,
		Handler: func(_ context.Context, _ pgx.Tx, sl acquire.Slot) error {
			mu.Lock()
			ran = append(ran, sl.Slot.String())
			mu.Unlock()
			return nil
		}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	ranSoFar := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}
	require.Eventually(t, func() bool { return len(ranSoFar()) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"2026-03-01T10:00:00Z/PT5M"}, ranSoFar())

	clock.Advance(4*time.Minute + 59*time.Second) // 10:10:59: [10:05, 10:10) is not due yet
	time.Sleep(200 * time.Millisecond)
	require.Len(t, ranSoFar(), 1, "not run before slot_end + lag")
	require.Zero(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE slot_start = '2026-03-01T10:05:00Z'`))

	clock.Advance(time.Second) // 10:11
	require.Eventually(t, func() bool { return len(ranSoFar()) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "2026-03-01T10:05:00Z/PT5M", ranSoFar()[1])

	clock.Advance(10 * time.Minute) // 10:21: two more windows due at once
	require.Eventually(t, func() bool { return len(ranSoFar()) == 4 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
