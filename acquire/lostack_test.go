package acquire

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loseNextAck makes the queue's next committed write report a lost
// connection, once.
func loseNextAck(q *Queue) {
	var lost atomic.Bool
	q.testLoseAck = func() bool { return lost.CompareAndSwap(false, true) }
}

// TestLostAcknowledgments: a write that committed but whose acknowledgment
// was lost with its connection is repeated, and its outcome recognised: a
// completion or a failure is not reported as a lost lease nor recorded
// twice, and a claim's slots are not left held by nobody until their lease
// expires.
func TestLostAcknowledgments(t *testing.T) {
	ctx := context.Background()
	t.Run("claim", func(t *testing.T) {
		f := newFixture(t, 2)
		q := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}})
		loseNextAck(q)
		leases, err := q.Claim(ctx, 1)
		require.NoError(t, err)
		require.Len(t, leases, 1)
		require.True(t, leases[0].Start.Equal(f.slotStart(1)), "the repeated claim took the next slot")
		r := f.row(f.slotStart(0))
		require.Equal(t, "AVAILABLE", r.Status, "the slot the lost claim took is released at once")
		require.Nil(t, r.Owner)
		require.Equal(t, "ACQUIRED", f.row(f.slotStart(1)).Status)
	})
	t.Run("complete", func(t *testing.T) {
		f := newFixture(t, 1)
		q := f.queue(Options{})
		leases, err := q.Claim(ctx, 1)
		require.NoError(t, err)
		loseNextAck(q)
		require.NoError(t, leases[0].Complete(ctx), "the completion landed; it is not a lost lease")
		require.True(t, leases[0].Finished())
		require.Equal(t, "COMPLETE", f.row(f.slotStart(0)).Status)
	})
	t.Run("fail", func(t *testing.T) {
		f := newFixture(t, 1)
		q := f.queue(Options{Policy: Policy{Retry: fixedRetry(time.Hour)}})
		leases, err := q.Claim(ctx, 1)
		require.NoError(t, err)
		loseNextAck(q)
		outcome, _, err := leases[0].Fail(ctx, errors.New("boom"))
		require.NoError(t, err)
		require.Equal(t, Failed, outcome)
		r := f.row(f.slotStart(0))
		require.Equal(t, 1, r.FailCount, "recorded once")
	})
	t.Run("complete many", func(t *testing.T) {
		f := newFixture(t, 3)
		q := f.queue(Options{})
		leases, err := q.Claim(ctx, 3)
		require.NoError(t, err)
		loseNextAck(q)
		lost, err := q.CompleteMany(ctx, leases)
		require.NoError(t, err)
		require.Empty(t, lost)
		require.Equal(t, 3, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	})
}
