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
