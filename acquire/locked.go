package acquire

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/retry"
)

// Run acquires the first acquirable slot of the series and runs h for it in
// locked mode. It returns ok=false and no error when no slot is acquirable.
// The error reports a failure to acquire or to record the outcome (then the
// outcome is Abandoned, and the slot acquirable again); the handler's own
// failure is in the Result.
func (q *Queue) Run(ctx context.Context, h Handler) (res Result, ok bool, err error) {
	results, err := q.RunBatch(ctx, 1, h)
	if len(results) == 0 {
		return Result{}, false, err
	}
	return results[0], true, err
}

// RunBatch is locked mode for short tasks: it locks up to max acquirable
// slots in one transaction, runs h for each in turn (each in its own
// savepoint, so a failing handler affects no other), and records every
// outcome with one UPDATE and one commit. It returns the results in slot
// order; none when no slot was acquirable.
//
// Handlers of a batch share one transaction, so keep them short: a batch
// holds its connection, and its locks, until the last handler returns. Each
// handler that writes uses a subtransaction; PostgreSQL caches 64 of them
// per transaction, so batches of writing handlers larger than 64 make other
// sessions' snapshots slower while they run.
//
// Faults are absorbed where that is safe. Beginning and selecting are
// repeated after a transient fault (nothing is held yet). When the
// transaction is lost afterwards (its connection died, a handler broke it),
// failures are still recorded, in a new transaction guarded by the fencing
// token, and the other slots become acquirable again with their handlers'
// writes rolled back (Abandoned). When the connection is lost during
// COMMIT, the database says whether the commit happened. When recording
// fails for a reason that would recur (a trigger refusing the write), every
// slot of the batch is recorded as failed with that reason, so that it backs
// off instead of running again at once for ever.
func (q *Queue) RunBatch(ctx context.Context, max int, h Handler) ([]Result, error) {
	results, err := q.runBatch(ctx, max, h)
	q.rewindAfter(results)
	return results, err
}

// rewindAfter makes the next search start from the start of the range when
// a slot of results is AVAILABLE again.
func (q *Queue) rewindAfter(results []Result) {
	for _, r := range results {
		if r.Outcome != Completed && r.Outcome != Skipped {
			q.floor.rewind()
			return
		}
	}
}

func (q *Queue) runBatch(ctx context.Context, max int, h Handler) ([]Result, error) {
	if max < 1 {
		return nil, fmt.Errorf("acquire: batch size %d: expected at least 1", max)
	}
	if err := q.held.acquire(ctx); err != nil {
		return nil, err
	}
	defer q.held.release()

	var tx pgx.Tx
	var slots []Slot
	var xid int64
	// Where to search is settled before the transaction holds a connection
	// (see frontier).
	lo, epoch := q.searchFrom(ctx, max)
	err := retry.Do(ctx, func(ctx context.Context) error {
		var err error
		if tx, err = q.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: q.sql.lockedBegin}); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if slots, xid, err = q.selectLocked(ctx, tx, max, lo, epoch); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if len(slots) == 0 {
		return nil, nil // the deferred ROLLBACK ends the empty search
	}
	results, err := runLocked(ctx, tx, xid, lockedWork{queues: []*Queue{q}, handlers: []Handler{h}, slots: slots, of: make([]int, len(slots))})
	return results[0], err
}

// lockedWork is what a locked-mode transaction holds: its slots, in the
// order their handlers run, and for each (of) the position of the queue it
// was taken for in queues, whose handler in handlers runs it. RunBatch's
// slots are all of one queue; RunAcross's of several.
type lockedWork struct {
	queues   []*Queue
	handlers []Handler
	slots    []Slot
	of       []int
	left     []int // RunAcross: the queues that may have work only RunBatch takes
}

// runLocked runs the handlers of the slots locked in tx (whose id is xid)
// in turn, each in its own savepoint, and records every outcome in tx
// before committing it; the results are by queue, as w.queues. When the
// transaction is lost, or the outcomes cannot be written or committed, each
// queue records what it can out of band (see RunBatch); a write refused
// for a reason that would recur fails the slots of the queue whose write
// it was, and the other queues' slots are acquirable again.
func runLocked(ctx context.Context, tx pgx.Tx, xid int64, w lockedWork) ([][]Result, error) {
	cleanup := context.WithoutCancel(ctx)
	b := &lockedBatch{q: w.queues[0], tx: tx, guard: &connGuard{}, state: &handlerState{}}
	connCtx, connLost := context.WithCancelCause(ctx)
	defer connLost(nil)
	stopPinger := b.startPinger(connCtx, connLost)
	results := make([][]Result, len(w.queues))
	for k, s := range w.slots {
		if closed, _ := b.connState(); ctx.Err() != nil || b.broken != nil || closed {
			break // shutdown or a lost transaction: the slots not started stay as they are
		}
		i := w.of[k]
		results[i] = append(results[i], b.run(connCtx, w.queues[i], s, w.handlers[i]))
	}
	stopPinger()

	cause := b.broken
	if c := context.Cause(connCtx); cause == nil && errors.Is(c, ErrConnectionLost) {
		cause = c
	}
	if cause == nil && tx.Conn().IsClosed() {
		cause = ErrConnectionLost
	}
	if cause != nil {
		_ = tx.Rollback(cleanup)
		return eachQueue(w.queues, results, func(q *Queue, rs []Result) ([]Result, error) {
			return q.recordOutOfBand(cleanup, rs, cause)
		})
	}
	if failed, err := finishAll(cleanup, tx, w.queues, results); err != nil {
		_ = tx.Rollback(cleanup)
		recurs := !retry.Transient(cleanup, err)
		return eachQueue(w.queues, results, func(q *Queue, rs []Result) ([]Result, error) {
			if recurs && (failed < 0 || q == w.queues[failed]) {
				rs = asFailures(q, rs, err)
			}
			return q.recordOutOfBand(cleanup, rs, err)
		})
	}
	if err := tx.Commit(cleanup); err != nil {
		return eachQueue(w.queues, results, func(q *Queue, rs []Result) ([]Result, error) {
			return q.afterFailedCommit(cleanup, rs, xid, err)
		})
	}
	return results, nil
}

// finishAll writes the outcomes of every queue's results in tx, in one
// round trip. When a write fails, failed is the position of the queue
// whose write it was, or -1 when that is not known (the round trip itself
// failed).
func finishAll(ctx context.Context, tx pgx.Tx, queues []*Queue, results [][]Result) (failed int, err error) {
	b := &pgx.Batch{}
	var of []int // the queue of each statement in b
	for i, q := range queues {
		if err := q.queueOutcomes(b, results[i]); err != nil {
			return i, err
		}
		for len(of) < b.Len() {
			of = append(of, i)
		}
	}
	// Each statement's check counts it done, so the first not done is the
	// one that failed.
	done := 0
	for _, qq := range b.QueuedQueries {
		check := qq.Fn
		qq.Fn = func(br pgx.BatchResults) error {
			var err error
			if check != nil {
				err = check(br)
			} else {
				_, err = br.Exec()
			}
			if err == nil {
				done++
			}
			return err
		}
	}
	if err := sendOutcomes(ctx, tx, b); err != nil {
		if done < len(of) {
			return of[done], err
		}
		return -1, err
	}
	return -1, nil
}

// eachQueue applies record to the results of each queue that has any, and
// returns the first error.
func eachQueue(queues []*Queue, results [][]Result, record func(*Queue, []Result) ([]Result, error)) ([][]Result, error) {
	var first error
	for i, q := range queues {
		if len(results[i]) == 0 {
			continue
		}
		var err error
		if results[i], err = record(q, results[i]); err != nil && first == nil {
			first = err
		}
	}
	return results, first
}

// lockedBatch is one locked-mode transaction and its slots.
type lockedBatch struct {
	q     *Queue
	tx    pgx.Tx
	guard *connGuard
	state *handlerState
	// handlerStart is when the running handler started (UnixNano), 0
	// between handlers; the pinger stops pinging for a handler that
	// overruns MaxWork by DeadMan.
	handlerStart atomic.Int64
	// broken is set when the transaction can no longer record outcomes: a
	// handler ended it, or did not return and its connection was closed.
	broken error
}
