package acquire

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/slot"
)

// RunAcross is batched locked mode across series: in one transaction it
// locks the first acquirable slot of each queue's series, with one
// statement, runs handlers[i] for the slot of queues[i] (each in its own
// savepoint, so a failing handler affects no other), and records every
// outcome before one commit. results[i] holds queues[i]'s result, or none
// when its series had no slot to give. Many series that each have one slot
// due (a boundary of thousands of series) are so worked in a transaction
// per batch of series instead of one per slot.
//
// A series gives nothing here when it is paused (as with RunBatch), when
// it has a cap (series.max_in_flight: admissions under a cap take the
// series' lock and permits, which RunBatch does), and when its only
// acquirable slots are expired leases: RunBatch takes those over. For such
// a queue, given nothing, results[i] is empty but not nil: RunBatch may
// find work there. A nil results[i] means the series had nothing for
// either, but for slots other transactions held.
//
// The queues must be distinct series on one pool and agree on the schema,
// NewestFirst, DeadMan and MaxWork (their transaction is one); otherwise
// RunAcross fails with an error wrapping slot.ErrInvalid. Faults are
// handled as in RunBatch; when recording fails for a reason that would
// recur, the slots of the series whose write failed are recorded as failed
// and the others become acquirable again. The handlers share one
// transaction and its connection: keep them short, as with RunBatch.
func RunAcross(ctx context.Context, queues []*Queue, handlers []Handler) ([][]Result, error) {
	if err := checkAcross(queues, handlers); err != nil {
		return nil, err
	}
	q := queues[0]
	if err := q.held.acquire(ctx); err != nil {
		return nil, err
	}
	defer q.held.release()

	names, intervals := make([]string, len(queues)), make([]string, len(queues))
	lags := make([]int64, len(queues))
	los, his := make([]time.Time, len(queues)), make([]time.Time, len(queues))
	for i, o := range queues {
		names[i], intervals[i], lags[i], los[i], his[i] = o.name, o.interval, o.opts.Lag.Microseconds(), o.from, o.to
	}
	var tx pgx.Tx
	var w lockedWork
	var xid int64
	err := retry.Do(ctx, func(ctx context.Context) error {
		var err error
		if tx, err = q.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: q.sql.lockedBegin}); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		w = lockedWork{queues: queues, handlers: handlers}
		if err = selectAcross(ctx, tx, &w, &xid, names, intervals, lags, los, his); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	results := make([][]Result, len(queues))
	if len(w.slots) > 0 {
		results, err = runLocked(ctx, tx, xid, w)
		for i, o := range queues {
			o.rewindAfter(results[i])
		}
	}
	for _, i := range w.left {
		if results[i] == nil {
			results[i] = []Result{}
		}
	}
	return results, err
}

// checkAcross reports why queues and handlers cannot share a transaction.
func checkAcross(queues []*Queue, handlers []Handler) error {
	if len(queues) == 0 || len(handlers) != len(queues) {
		return fmt.Errorf("%w: RunAcross: %d queues and %d handlers: expected one handler per queue, and at least one queue",
			slot.ErrInvalid, len(queues), len(handlers))
	}
	q := queues[0]
	seen := make(map[[2]string]bool, len(queues))
	for _, o := range queues {
		if o.pool != q.pool || o.sql != q.sql || o.opts.MaxWork != q.opts.MaxWork {
			return fmt.Errorf("%w: RunAcross: %s %s and %s %s differ in pool, schema, NewestFirst, DeadMan or MaxWork",
				slot.ErrInvalid, q.name, q.interval, o.name, o.interval)
		}
		// One statement locking the same series twice would take the same
		// slot twice: a row locked by the statement's own transaction is
		// not skipped.
		k := [2]string{o.name, o.interval}
		if seen[k] {
			return fmt.Errorf("%w: RunAcross: %s %s given twice", slot.ErrInvalid, o.name, o.interval)
		}
		seen[k] = true
	}
	return nil
}

// selectAcross locks the slots of w's queues in tx (select_across.sql) and
// fills w.slots and w.of, w.left, and xid with the transaction's id.
func selectAcross(ctx context.Context, tx pgx.Tx, w *lockedWork, xid *int64, names, intervals []string, lags []int64, los, his []time.Time) error {
	rows, err := tx.Query(ctx, w.queues[0].sql.selectAcross, names, intervals, lags, los, his)
	if err != nil {
		return fmt.Errorf("select slots: %w", err)
	}
	var r slotRow
	var i, heldFence int64
	var left bool
	_, err = pgx.ForEachRow(rows, append(append([]any{&i}, r.dest()...), &heldFence, xid, &left), func() error {
		if left {
			w.left = append(w.left, int(i-1))
			return nil
		}
		s, err := r.locked(w.queues[i-1], heldFence)
		if err != nil {
			return err
		}
		w.slots = append(w.slots, s)
		w.of = append(w.of, int(i-1))
		return nil
	})
	if err != nil {
		return fmt.Errorf("select slots: %w", err)
	}
	return nil
}
