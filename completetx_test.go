package almanac

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestLeaseHandlerWhoseCompleteTxDidNotCommit: a lease handler that calls
// CompleteTx, rolls its transaction back and returns nil fails its slot,
// with a message that says so, and the slot is parked after MaxAttempts.
// Before, nothing was recorded: the slot stayed ACQUIRED until its lease
// expired, and was taken over and run again for ever.
func TestLeaseHandlerWhoseCompleteTxDidNotCommit(t *testing.T) {
	db := pgtest.New(t)
	rec := &recorder{}
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	e.onResult = rec.add
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, e.add(Job{Series: series(t, "rolled", "PT1M"), From: start, To: start.Add(time.Minute),
		Policy: Policy{MaxAttempts: 2, Retry: func(int, error) (time.Duration, bool) { return 0, true }, LeaseTTL: 2 * time.Second, TakeoverGrace: -1},
		LeaseHandler: func(ctx context.Context, l *acquire.Lease) error {
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			if err := l.CompleteTx(ctx, tx); err != nil {
				return err
			}
			return tx.Rollback(ctx)
		}}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.drain(ctx)
	var left *IncompleteError
	require.ErrorAs(t, err, &left, "the parked slot is left")
	require.Equal(t, int64(1), left.Parked)
	require.Equal(t, map[acquire.Outcome]int{acquire.Failed: 1, acquire.Parked: 1}, rec.outcomes("rolled"))
	for _, res := range rec.of("rolled") {
		require.ErrorContains(t, res.Err, "did not commit")
	}
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE not_before = 'infinity' AND fail_count = 2
		AND message LIKE '%CompleteTx was called but its transaction did not commit'`))
}
