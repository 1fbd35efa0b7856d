package acquire

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeriesLagHoldsClaims: the lag stored on the series row is obeyed by
// every claim, in both modes, whatever the queue's own Lag; the larger of
// the two wins.
func TestSeriesLagHoldsClaims(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	// About 114 years: none of the fixture's slots is due.
	f.exec(`UPDATE {{schema}}.series SET lag = interval '1000000 hours'`)
	q := f.queue(Options{})
	leases, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	require.Empty(t, leases, "lease mode claims no slot the series' lag holds back")
	_, ok, err := q.Run(ctx, func(context.Context, pgx.Tx, Slot) error {
		t.Fatal("locked mode claims no slot the series' lag holds back")
		return nil
	})
	require.NoError(t, err)
	require.False(t, ok)

	// A series lag shorter than the queue's: the queue's wins.
	f.exec(`UPDATE {{schema}}.series SET lag = interval '1 second'`)
	leases, err = f.queue(Options{Policy: Policy{Lag: 1000000 * time.Hour}}).Claim(ctx, 3)
	require.NoError(t, err)
	require.Empty(t, leases)

	// Cleared: every slot is due again.
	f.exec(`UPDATE {{schema}}.series SET lag = NULL`)
	q.Rewind()
	leases, err = q.Claim(ctx, 3)
	require.NoError(t, err)
	require.Len(t, leases, 3)
}

// TestPausedSeriesClaimsNothing: while the series row says paused, no
// claim takes a slot, in either mode, expired leases included; a lease
// held when it was paused still completes.
func TestPausedSeriesClaimsNothing(t *testing.T) {
	f := newFixture(t, 4)
	ctx := context.Background()
	q := f.queue(Options{})
	held, err := q.Claim(ctx, 2)
	require.NoError(t, err)
	require.Len(t, held, 2)
	// The second lease expired long ago: a takeover would be due.
	f.exec(`UPDATE {{schema}}.slot SET lease_until = '2000-01-01' WHERE slot_start = $1`, f.slotStart(1))
	f.exec(`UPDATE {{schema}}.series SET paused_at = clock_timestamp(), paused_by = 'test', paused_reason = 'maintenance'`)

	other := f.queue(Options{})
	leases, err := other.Claim(ctx, 4)
	require.NoError(t, err)
	require.Empty(t, leases, "a paused series gives no lease, and no expired one")
	_, ok, err := other.Run(ctx, func(context.Context, pgx.Tx, Slot) error {
		t.Fatal("a paused series gives locked mode no slot")
		return nil
	})
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, held[0].Complete(ctx), "a slot held when the series was paused finishes")
	require.Equal(t, "COMPLETE", f.row(f.slotStart(0)).Status)

	f.exec(`UPDATE {{schema}}.series SET paused_at = NULL, paused_by = NULL, paused_reason = NULL`)
	other.Rewind()
	leases, err = other.Claim(ctx, 4)
	require.NoError(t, err)
	require.Len(t, leases, 3, "resumed: the expired lease and the two AVAILABLE slots")
}

// TestCapAdmitsNoMoreThanMaxInFlight: with max_in_flight = 3, locked-mode
// and lease-mode workers racing for 60 slots never hold more than 3 at
// once, and all 60 complete. The workers count a slot as held only inside
// a window they know lies within the real hold: from after their claim
// returned until before their outcome is sent. A wider window (say, until
// after the commit returned) would count a slot another worker may
// already have claimed once the commit freed it, and fail a correct cap.
func TestCapAdmitsNoMoreThanMaxInFlight(t *testing.T) {
	const slots, limit = 60, 3
	f := newFixture(t, slots)
	ctx := context.Background()
	f.exec(`UPDATE {{schema}}.series SET max_in_flight = $1`, limit)
	var held, most atomic.Int64
	enter := func(n int) {
		now := held.Add(int64(n))
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 6 {
		q := f.queue(Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if w%2 == 0 {
					results, err := q.RunBatch(ctx, 1, func(ctx context.Context, tx pgx.Tx, s Slot) error {
						enter(1) // the transaction holds its slot from its claim on
						_, err := tx.Exec(ctx, `SELECT pg_sleep(0.002)`)
						held.Add(-1) // and until its commit, which follows
						return err
					})
					if !assert.NoError(t, err) || len(results) == 0 {
						return
					}
					continue
				}
				leases, err := q.Claim(ctx, 2)
				if !assert.NoError(t, err) {
					return
				}
				if len(leases) == 0 {
					return
				}
				enter(len(leases))
				time.Sleep(2 * time.Millisecond) // a window for an overlap to show in
				held.Add(-int64(len(leases)))    // the leases stay held until CompleteMany commits
				_, err = q.CompleteMany(ctx, leases)
				if !assert.NoError(t, err) {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int64(limit), "slots held at once")
	require.Equal(t, slots, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
}
