package acquire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// TestCompleteTxThatDidNotCommit: a handler that calls CompleteTx and
// returns nil although that transaction rolled back, or its COMMIT failed,
// gets a failure recorded that says so, counted toward MaxAttempts. Before,
// Finish wrote nothing, and the slot stayed ACQUIRED until its lease
// expired and was taken over, again and again, never parked.
func TestCompleteTxThatDidNotCommit(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	f.exec(`CREATE TABLE {{schema}}.parent (id int PRIMARY KEY)`)
	f.exec(`CREATE TABLE {{schema}}.child (id int REFERENCES {{schema}}.parent DEFERRABLE INITIALLY DEFERRED)`)
	q := f.queue(Options{Policy: Policy{MaxAttempts: 2, Retry: fixedRetry(0)}})
	claim := func() *Lease {
		t.Helper()
		leases, err := q.Claim(ctx, 1)
		require.NoError(t, err)
		require.Len(t, leases, 1)
		return leases[0]
	}
	const said = "CompleteTx was called but its transaction did not commit"

	// Rolled back.
	l := claim()
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Rollback(ctx))
	outcome, _, err := l.Finish(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, Failed, outcome)
	r := f.row(l.Start)
	require.Equal(t, "AVAILABLE", r.Status)
	require.Equal(t, 1, r.FailCount)
	require.Equal(t, said, *r.Message)

	// Its COMMIT failed (a deferred constraint): the second failure parks it.
	l = claim()
	tx, err = f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	_, err = tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.child VALUES (1)`, f.schema))
	require.NoError(t, err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, tx.Commit(ctx), &pgErr)
	require.Equal(t, "23503", pgErr.Code)
	outcome, _, err = l.Finish(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, Parked, outcome)
	r = f.row(l.Start)
	require.True(t, r.Parked)
	require.Equal(t, 2, r.FailCount)
	require.Contains(t, *r.Message, said)
	var kinds []string
	for _, e := range f.events() {
		kinds = append(kinds, e.Event)
	}
	require.Equal(t, []string{"failed", "parked"}, kinds)
}

// TestCompleteTxThatCommitted: once the transaction CompleteTx was called
// in has committed, the slot is complete: Finish reports it whatever the
// handler returned, and a heartbeat that no longer finds the lease does not
// take it for lost (which cancelled the handler's context and reported the
// slot abandoned).
func TestCompleteTxThatCommitted(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	q := f.queue(Options{})
	leases, err := q.Claim(ctx, 2)
	require.NoError(t, err)
	for _, l := range leases {
		require.NoError(t, pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error { return l.CompleteTx(ctx, tx) }))
	}

	lost, err := q.Extend(ctx, leases)
	require.NoError(t, err)
	require.Empty(t, lost, "a heartbeat after the completion committed")
	for _, l := range leases {
		select {
		case <-l.Lost():
			t.Fatal("the lease was taken for lost")
		default:
		}
	}

	outcome, _, err := leases[0].Finish(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, Completed, outcome)
	outcome, _, err = leases[1].Finish(ctx, errors.New("failed after its commit"))
	require.NoError(t, err)
	require.Equal(t, Completed, outcome)
	for _, l := range leases {
		require.Equal(t, "COMPLETE", f.row(l.Start).Status)
	}
}

// TestCompleteTxLeftOpen: a handler that returns while the transaction
// CompleteTx was called in is still open does not keep its worker: the
// outcome write waits for the row a short while, then fails saying why.
func TestCompleteTxLeftOpen(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	leases, err := f.queue(Options{}).Claim(ctx, 1)
	require.NoError(t, err)
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	require.NoError(t, leases[0].CompleteTx(ctx, tx))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err = leases[0].Finish(wctx, nil)
	require.ErrorContains(t, err, "still holds the slot's row")
	require.NoError(t, wctx.Err(), "the write gave up before its context ended")
}
