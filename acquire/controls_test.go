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
	claimsNothing(t, q, 3, "no slot the series' lag holds back")

	// A series lag shorter than the queue's: the queue's wins.
	f.exec(`UPDATE {{schema}}.series SET lag = interval '1 second'`)
	leases, err := f.queue(Options{Policy: Policy{Lag: 1000000 * time.Hour}}).Claim(ctx, 3)
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
	claimsNothing(t, other, 4, "no slot of a paused series, and no expired lease")
	require.NoError(t, held[0].Complete(ctx), "a slot held when the series was paused finishes")
	require.Equal(t, "COMPLETE", f.row(f.slotStart(0)).Status)

	f.exec(`UPDATE {{schema}}.series SET paused_at = NULL, paused_by = NULL, paused_reason = NULL`)
	other.Rewind()
	leases, err := other.Claim(ctx, 4)
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
				// A round trip while the leases are held: the window in which
				// another worker's claim would show as an overlap.
				if _, err := f.db.Pool.Exec(ctx, `SELECT 1`); !assert.NoError(t, err) {
					return
				}
				held.Add(-int64(len(leases))) // the leases stay held until CompleteMany commits
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

// TestUpstreamAddedLaterHoldsClaims: a queue that last read its series
// without upstream series claims with the statements that do not test
// them; when another process then makes the series depend on one whose
// slots are not done, those statements take no AVAILABLE slot, in either
// mode, however long the queue goes on trusting its read. Once it reads
// the dependency it tests each slot against the upstream series.
func TestUpstreamAddedLaterHoldsClaims(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	q := f.queue(Options{})
	require.Equal(t, controls{}, q.controls(ctx, f.db.Pool))

	f.exec(`INSERT INTO {{schema}}.series (name, "interval", origin) VALUES ('ingest', 'PT1M', '2000-01-01')`)
	f.exec(`INSERT INTO {{schema}}.series_dependency (name, "interval", up_name, up_interval) VALUES ('report', 'PT1M', 'ingest', 'PT1M')`)
	q.ctl.when = time.Now().Add(time.Hour) // the read before the dependency is trusted throughout
	claimsNothing(t, q, 3, "no slot whose upstream slots are not done")

	q.ctl.when = time.Time{}
	require.Equal(t, controls{upstream: true}, q.controls(ctx, f.db.Pool))
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, completed_at)
		SELECT 'ingest', 'PT1M', slot_start, slot_end, 'COMPLETE', now() FROM {{schema}}.slot WHERE name = 'report' AND slot_start < $1`,
		f.slotStart(2))
	q.Rewind()
	leases, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	require.Len(t, leases, 2, "the slots whose upstream slots are done, not the one whose are not")
}

// claimsNothing: q's claims of up to n slots, in lease mode and in locked
// mode, take none (what says why).
func claimsNothing(t *testing.T, q *Queue, n int, what string) {
	t.Helper()
	ctx := context.Background()
	leases, err := q.Claim(ctx, n)
	require.NoError(t, err)
	require.Empty(t, leases, "lease mode claims %s", what)
	_, ok, err := q.Run(ctx, func(context.Context, pgx.Tx, Slot) error {
		t.Errorf("locked mode claims %s", what)
		return nil
	})
	require.NoError(t, err)
	require.False(t, ok)
}
