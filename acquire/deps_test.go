package acquire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// depsFixture is a fixture whose report series depends on an ingest
// series of the same PT1M grid, every ingest slot COMPLETE.
func depsFixture(t *testing.T, n int) *fixture {
	t.Helper()
	f := newFixture(t, n)
	ingest, err := slot.NewSeries("ingest", mustInterval("PT1M"), time.UTC, time.Time{})
	require.NoError(t, err)
	_, _, err = seriesdb.Add(context.Background(), f.db.Pool, f.schema, ingest)
	require.NoError(t, err)
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, completed_at)
		SELECT 'ingest', 'PT1M', slot_start, slot_end, 'COMPLETE', now() FROM {{schema}}.slot WHERE name = 'report'`)
	f.exec(`INSERT INTO {{schema}}.series_dependency (name, "interval", up_name, up_interval) VALUES ('report', 'PT1M', 'ingest', 'PT1M')`)
	return f
}

// reopenIngest re-opens the ingest slot of report slot i by plain SQL.
func (f *fixture) reopenIngest(i int) {
	f.t.Helper()
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late rows' WHERE name = 'ingest' AND slot_start = $1`, f.slotStart(i))
}

// rerun checks that report slot i is AVAILABLE as generation gen, with the
// upstream slot that caused it as its message and in a 'reopened' event
// that carries the completion of the run before it.
func (f *fixture) rerun(i int, gen int64) {
	f.t.Helper()
	r := f.row(f.slotStart(i))
	require.Equal(f.t, "AVAILABLE", r.Status, "slot %d ran on stale input: not COMPLETE", i)
	require.NotNil(f.t, r.Message)
	require.Contains(f.t, *r.Message, "upstream ingest "+slot.FormatTime(f.slotStart(i))+"/PT1M re-opened")
	require.Zero(f.t, r.Attempts)
	require.Nil(f.t, r.CompletedAt)
	require.Equal(f.t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'report' AND slot_start = $1
		AND generation = $2 AND reopen_cause IS NULL`, f.slotStart(i), gen))
	require.Equal(f.t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot_history WHERE name = 'report' AND slot_start = $1
		AND event = 'reopened' AND generation = $2 AND message LIKE 'upstream ingest %'`, f.slotStart(i), gen))
	// The stale run's completion, which the history shows from the
	// 're-opened' event (migration 4): who ran it, with which fence and
	// attempt, and when it completed.
	require.Equal(f.t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot_history WHERE name = 'report' AND slot_start = $1
		AND event = 'completed' AND generation = $2 - 1 AND owner IS NOT NULL AND fence IS NOT NULL AND attempt >= 1
		AND at IS NOT NULL`, f.slotStart(i), gen), "slot %d: the stale run's completion is in its history", i)
}

// TestLeaseOnStaleInputRerunsAfterUpstreamReopen: a lease held when an
// upstream slot it depends on is re-opened does not end COMPLETE, by
// every lease completion (Complete, CompleteMany, CompleteTx); it ends
// AVAILABLE as the next generation. A failure or a release keeps the
// mark; a skip stands; a stale holder is still fenced off.
func TestLeaseOnStaleInputRerunsAfterUpstreamReopen(t *testing.T) {
	ctx := context.Background()
	f := depsFixture(t, 6)
	q := f.queue(Options{Policy: Policy{Retry: fixedRetry(time.Hour), TakeoverGrace: -1}})
	leases, err := q.Claim(ctx, 6)
	require.NoError(t, err)
	require.Len(t, leases, 6)
	for i := range 6 {
		f.reopenIngest(i)
	}
	require.Equal(t, 6, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'report' AND reopen_cause IS NOT NULL`),
		"the re-opens mark the leases, which stay held")

	require.NoError(t, leases[0].Complete(ctx))
	f.rerun(0, 2)

	lost, err := q.CompleteMany(ctx, leases[1:2])
	require.NoError(t, err)
	require.Empty(t, lost)
	f.rerun(1, 2)

	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, leases[2].CompleteTx(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	f.rerun(2, 2)

	// A failure and a release keep the mark: the generation they belong
	// to still ran on stale input, whichever attempt completes it.
	_, _, err = leases[3].Fail(ctx, errors.New("timeout"))
	require.NoError(t, err)
	require.NoError(t, leases[4].Release(ctx))
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE name = 'ingest'`)
	f.exec(`UPDATE {{schema}}.slot SET not_before = NULL WHERE name = 'report'`)
	again, err := q.Claim(ctx, 6)
	require.NoError(t, err)
	require.Len(t, again, 5, "the re-runs of 0-2, the failed 3 and the released 4")
	for _, l := range again {
		require.NoError(t, l.Complete(ctx))
	}
	f.rerun(3, 2)
	f.rerun(4, 2)
	require.Equal(t, 3, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'report' AND status = 'COMPLETE' AND generation = 2`),
		"generation 2 of 0-2 ran on fresh input")

	// A skip stands, and leaves no mark behind.
	require.NoError(t, leases[5].Skip(ctx, "nothing to do"))
	require.Equal(t, "SKIP", f.row(f.slotStart(5)).Status)
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE reopen_cause IS NOT NULL`))

	// Fencing: a holder whose lease was taken over is refused, mark or
	// not; the new holder's completion is the one the mark turns into a
	// re-run.
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE name = 'ingest'`)
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'again' WHERE name = 'report' AND slot_start = $1`, f.slotStart(0))
	old, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, old, 1)
	f.expire(old[0].Start)
	taken, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	f.reopenIngest(0)
	require.ErrorIs(t, old[0].Complete(ctx), ErrLeaseLost)
	require.NoError(t, taken[0].Complete(ctx))
	f.rerun(0, 4)
}

// TestLeaseCompletionSeesUpstreamRedone: a lease claimed while an
// upstream re-open was not committed yet is not marked (the slot was
// AVAILABLE when the re-open's trigger ran). Its completion finds the
// upstream slot changed all the same: re-opened, once the re-open
// commits (the completion waits for it), or done again by a run with a
// later fence.
func TestLeaseCompletionSeesUpstreamRedone(t *testing.T) {
	ctx := context.Background()
	f := depsFixture(t, 2)
	q := f.queue(Options{})

	reopen, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reopen.Rollback(ctx) }()
	_, err = reopen.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE name = 'ingest' AND slot_start = $1`, f.schema), f.slotStart(0))
	require.NoError(t, err)
	leases, err := q.Claim(ctx, 2)
	require.NoError(t, err)
	require.Len(t, leases, 2, "the re-open is not committed: every upstream slot looks done")
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE reopen_cause IS NOT NULL`))

	done := make(chan error, 1)
	go func() { done <- leases[0].Complete(ctx) }()
	waitForBlocked(t, f, reopen)
	require.NoError(t, reopen.Commit(ctx))
	require.NoError(t, <-done)
	f.rerun(0, 2)

	// Slot 1's upstream slot is done again by a later run (a later fence)
	// while the lease runs: what the lease read may be older.
	f.exec(`UPDATE {{schema}}.slot SET fence = nextval('{{schema}}.fence_seq') WHERE name = 'ingest' AND slot_start = $1`, f.slotStart(1))
	require.NoError(t, leases[1].Complete(ctx))
	f.rerun(1, 2)
}

// waitForBlocked waits until some session waits for a lock that the
// session of tx holds.
func waitForBlocked(t *testing.T, f *fixture, tx pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	var holder int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, holder).Scan(&waiting))
		return waiting
	}, 30*time.Second, time.Millisecond, "the completion did not wait for the upstream re-open")
}

// TestLockedRunOnStaleInputRerunsAfterUpstreamReopen: in locked mode the
// slot's row is AVAILABLE, locked by the worker's transaction. A re-open
// of its upstream slot neither waits for the worker nor changes the row
// (the trigger's update does not match an AVAILABLE row, and it skips
// locked ones), so the worker's completion would stand on stale input;
// the completion tests its upstream slots itself and leaves the slot
// AVAILABLE as the next generation: when the upstream slot is still
// re-opened, and when it was done again meanwhile by plain SQL (no new
// fence: written after the run's transaction began).
func TestLockedRunOnStaleInputRerunsAfterUpstreamReopen(t *testing.T) {
	ctx := context.Background()
	f := depsFixture(t, 2)
	q := f.queue(Options{})

	release := holdBatch(q, 1)
	f.reopenIngest(0) // returns: the re-open does not wait for the worker
	r := f.row(f.slotStart(0))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'report' AND (generation <> 1 OR reopen_cause IS NOT NULL)`),
		"the trigger left the locked row alone")
	results, err := release()
	require.NoError(t, err)
	require.Len(t, results, 1)
	f.rerun(0, 2)

	release = holdBatch(q, 1)
	f.reopenIngest(1)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE name = 'ingest'`)
	_, err = release()
	require.NoError(t, err)
	f.rerun(1, 2)

	// Fresh input: generation 2 completes.
	results, err = q.RunBatch(ctx, 2, func(context.Context, pgx.Tx, Slot) error { return nil })
	require.NoError(t, err)
	require.Len(t, results, 2)
	require.Equal(t, 2, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'report' AND status = 'COMPLETE' AND generation = 2`))
}
