package acquire

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/retry"
)

// outcomesPerStatement bounds the outcomes finish writes with one
// statement. Each row looks its values up in the statement's arrays, and
// an element of an array of variable width (a status, a message) or with
// NULLs is found by walking the array from its start, so the cost per
// outcome grows with the batch: measured 6.1 µs per outcome in a batch of
// 100, 7.4 at 500, 9.0 at 1,000, 13 at 2,000 and 64 at 16,000.
const outcomesPerStatement = 500

// finish writes the outcomes of the batch, sorted by slot start as
// finishLocked takes them, with one statement per outcomesPerStatement,
// all sent at once.
func (q *Queue) finish(ctx context.Context, tx pgx.Tx, results []Result) error {
	b := &pgx.Batch{}
	if err := q.queueOutcomes(b, results); err != nil {
		return err
	}
	return sendOutcomes(ctx, tx, b)
}

// queueOutcomes adds to b the statements that write the outcomes of
// results, sorted by slot start as finishLocked takes them, one per
// outcomesPerStatement.
func (q *Queue) queueOutcomes(b *pgx.Batch, results []Result) error {
	results = slices.SortedFunc(slices.Values(results), func(a, b Result) int { return a.Slot.Start.Compare(b.Slot.Start) })
	for chunk := range slices.Chunk(results, outcomesPerStatement) {
		if err := q.finishSorted(b, chunk); err != nil {
			return err
		}
	}
	return nil
}

// sendOutcomes sends the statements queued in b in tx, in one round trip.
func sendOutcomes(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("acquire: record outcomes: %w", err)
	}
	return nil
}

// finishSorted adds to b the statement that writes outcomes sorted by slot
// start, if any is not Abandoned.
func (q *Queue) finishSorted(b *pgx.Batch, results []Result) error {
	var (
		starts   []time.Time
		statuses []string
		fences   []int64
		attempts []int
		failures []int
		messages []*string
		delays   []*int64
		data     []*string
	)
	for _, r := range results {
		if r.Outcome == Abandoned {
			continue
		}
		s := r.Slot
		status, failCount, message, delay, saved, err := outcomeColumns(r)
		if err != nil {
			return err
		}
		starts = append(starts, s.Start)
		statuses = append(statuses, status)
		fences = append(fences, s.Fence)
		attempts = append(attempts, s.Attempt)
		if failCount < 0 {
			failCount = s.FailCount
		}
		failures = append(failures, failCount)
		if message == nil && r.Outcome == Snoozed && s.Message != "" {
			message = &s.Message
		}
		messages = append(messages, message)
		delays = append(delays, delay)
		data = append(data, saved)
	}
	switch len(starts) {
	case 0:
	case 1:
		b.Queue(q.sql.finishOne, q.name, q.interval, starts[0], statuses[0], fences[0], attempts[0], failures[0],
			messages[0], delays[0], data[0], q.opts.Owner)
	default:
		b.Queue(q.sql.finishLocked, q.name, q.interval, starts, statuses, fences, attempts, failures, messages, delays,
			data, q.opts.Owner).QueryRow(func(row pgx.Row) error {
			var written int
			if err := row.Scan(&written); err != nil {
				return err
			}
			if written != len(starts) {
				return fmt.Errorf("%d of %d written: %w", written, len(starts), errOutcomesMissing)
			}
			return nil
		})
	}
	return nil
}

// errOutcomesMissing reports a batch write that found fewer of its locked
// slots than it was given outcomes for, which only outcomes out of slot
// order cause (see finishLocked): committing would keep the handlers' work
// and leave those slots to run again.
var errOutcomesMissing = errors.New("outcomes not written to their locked slots")

// recordOutOfBand records what it can of a batch whose transaction was
// lost (cause): nothing of it committed, so every result is Abandoned (the
// slot is acquirable again, the handler's writes rolled back), except the
// failures. Those are recorded in a new transaction, so that a slot that
// keeps failing (or keeps losing its connection while it fails) counts its
// failures, backs off and parks instead of running again at once for ever.
// Each write is guarded by the fence the slot had when the batch took it
// and skipped if another worker holds the slot by now (or takes it within
// two seconds). It returns an error when anything was left unrecorded.
func (q *Queue) recordOutOfBand(ctx context.Context, results []Result, cause error) ([]Result, error) {
	ctx, cancel := context.WithTimeout(ctx, outOfBandTimeout)
	defer cancel()
	var unrecorded error
	for i, r := range results {
		if r.Outcome != Failed && r.Outcome != Parked {
			if r.Outcome != Abandoned {
				results[i].Outcome, results[i].Err = Abandoned, cause
			}
			unrecorded = cause
			continue
		}
		_, failCount, message, delay, _, _ := outcomeColumns(r)
		var affected int64
		_, werr := q.write(ctx, func(b *pgx.Batch) {
			b.Queue(shortLockWait)
			b.Queue(runOwner, q.opts.Owner)
			b.Queue(q.sql.failOutOfBand, q.name, q.interval, r.Slot.Start, r.Slot.heldFence, r.Slot.Fence,
				r.Slot.Attempt, failCount, message, delay).Exec(func(tag pgconn.CommandTag) error {
				affected = tag.RowsAffected()
				return nil
			})
		})
		if werr != nil || affected == 0 {
			q.opts.Logger.Warn("almanac: recording a failure after the slot's transaction was lost failed",
				"series", q.name, "interval", q.interval, "slot", r.Slot.Slot.String(), "fence", r.Slot.Fence, "error", werr)
			results[i].Outcome, results[i].Err = Abandoned, cause
			unrecorded = cause
		}
	}
	if unrecorded != nil {
		return results, fmt.Errorf("acquire: %w", unrecorded)
	}
	return results, nil
}

// asFailures turns every outcome of a batch whose transaction cannot commit
// for a reason that would recur into a failure carrying that reason.
func asFailures(q *Queue, results []Result, cause error) []Result {
	for i, r := range results {
		if r.Outcome == Abandoned || r.Outcome == Failed || r.Outcome == Parked {
			continue
		}
		err := fmt.Errorf("acquire: recording the outcome %q failed: %w", r.Outcome, cause)
		results[i].Outcome, results[i].Delay, results[i].Err = q.classify(r.Slot, err)
	}
	return results
}

// abandon marks every result as not recorded because of cause.
func abandon(results []Result, cause error) []Result {
	for i := range results {
		results[i].Outcome, results[i].Err = Abandoned, cause
	}
	return results
}

// afterFailedCommit decides what a failed COMMIT of a batch means. A lost
// connection leaves the outcome unknown: the database says whether the
// transaction committed. A commit the server refused (a deferred
// constraint of a handler's write) committed nothing, and would be refused
// again: every slot is recorded as failed with the reason.
func (q *Queue) afterFailedCommit(ctx context.Context, results []Result, xid int64, err error) ([]Result, error) {
	if !retry.Transient(ctx, err) {
		return q.recordOutOfBand(ctx, asFailures(q, results, fmt.Errorf("commit: %w", err)), err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, outOfBandTimeout)
	committed, cerr := retry.Committed(checkCtx, q.pool, xid)
	cancel()
	switch {
	case cerr != nil:
		err = fmt.Errorf("acquire: commit: %w; and whether it committed is unknown: %w", err, cerr)
		return abandon(results, err), err
	case committed:
		return results, nil
	default:
		return q.recordOutOfBand(ctx, results, fmt.Errorf("commit: %w", err))
	}
}

// outOfBandTimeout bounds recording outcomes after the slot's transaction
// was lost.
const outOfBandTimeout = 30 * time.Second
