package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
