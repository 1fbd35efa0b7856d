package coverage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// Slot statuses, as stored in the status column.
const (
	StatusAvailable = "AVAILABLE"
	StatusAcquired  = "ACQUIRED"
	StatusComplete  = "COMPLETE"
	StatusSkip      = "SKIP"
)

// DefaultReopenReason is the message of re-opened slots when
// ReopenOptions.Reason is empty.
const DefaultReopenReason = "reopened"

// ReopenOptions tune Reopen. The zero value re-opens COMPLETE and SKIP
// slots.
type ReopenOptions struct {
	// Reason is stored in the message of every re-opened slot and in its
	// history. Default DefaultReopenReason. It must pass input.CheckReason
	// (valid UTF-8, no control characters but tab and newline, no invisible
	// characters, at most input.MaxReasonLen bytes).
	Reason string
	// States are the statuses to re-open: StatusComplete, StatusSkip or
	// both. Default both.
	States []string
	// Parked also re-opens parked slots (AVAILABLE with not_before
	// 'infinity': they gave up after their maximum attempts), giving them a
	// fresh set of attempts.
	Parked bool
	// DryRun reports what would be re-opened and held, and changes nothing.
	DryRun bool
	// Progress, if set, is called after each chunk.
	Progress ProgressFunc
}

// ReopenResult says what Reopen did.
type ReopenResult struct {
	// Reopened is the number of slots made AVAILABLE (with DryRun, that
	// would be).
	Reopened int64
	// Held lists, in slot order, the slots of the range that workers hold
	// and that were therefore left alone: ACQUIRED ones, and rows locked by
	// another transaction. Re-open those once they are done if their work
	// must see the new data.
	Held []Held
}

// Reopen makes the COMPLETE and SKIP slots of [from, to) AVAILABLE again
// for a backfill (see ReopenOptions for other selections), and wakes idle
// workers once if it re-opened any. A re-opened slot is redone from scratch,
// as a new computation: its generation grows by one, its message becomes
// the reason, attempts (so the next attempt is 1 again), fail_count,
// not_before and the previous run's data and completed_at are cleared; its
// fence is kept. Each re-opened slot gets a 'reopened' event in its
// history, with the reason and the client's actor.
//
// A slot completed a moment ago can also show up as held: a worker's
// concurrent acquisition attempt may still hold its row lock (READ
// COMMITTED re-checks the locked row, finds it no longer acquirable, and
// keeps the lock until that transaction ends). Re-open it again shortly.
//
// Compacted slots (see Compact) of the range are brought back: inserted
// again, AVAILABLE, as the generation after the highest compacted, with
// the reason and a 'reopened' event, and counted in Reopened.
//
// Slots in flight are never changed and never waited for: ACQUIRED slots,
// and slots another transaction has locked — including AVAILABLE slots that
// a locked-mode worker is working on, found by trying to lock them too — are
// returned in Held. Missing slots are not created; Materialize them.
//
// The range is worked in transactions of at most Options.ChunkSize slots;
// if one fails, the chunks before it stay re-opened. The notification is
// sent in the last chunk's transaction.
func (c *Client) Reopen(ctx context.Context, from, to time.Time, opts ReopenOptions) (ReopenResult, error) {
	if err := input.CheckReason(opts.Reason); err != nil {
		return ReopenResult{}, err
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return ReopenResult{}, err
	}
	states := opts.States
	if len(states) == 0 {
		states = []string{StatusComplete, StatusSkip}
	}
	for _, s := range states {
		if s != StatusComplete && s != StatusSkip {
			return ReopenResult{}, fmt.Errorf("%w: cannot re-open state %q; expected %s or %s", slot.ErrInvalid, s, StatusComplete, StatusSkip)
		}
	}
	reason := opts.Reason
	if reason == "" {
		reason = DefaultReopenReason
	}
	sql, reasonArg := c.sql.reopen, []any{reason, c.actor}
	if opts.DryRun {
		sql, reasonArg = c.sql.reopenDry, nil // writes no message
	}
	var res ReopenResult
	err = c.eachChunk(from, to, total, opts.Progress, func(p part, last bool) error {
		var n int64
		var h heldScan
		err := c.inTx(ctx, noWaitSettings, opts.DryRun, func(tx pgx.Tx) error {
			h = heldScan{}
			// The writer lock orders this against a compaction of the
			// chunk: compacted slots are brought back first, then the
			// stored ones are re-opened.
			if err := c.lockSeries(ctx, tx); err != nil {
				return err
			}
			restored, err := c.restoreCompacted(ctx, tx, p, states, reason, opts.DryRun)
			if err != nil {
				return err
			}
			args := append([]any{c.name, c.interval, p.lo, p.hi, states, opts.Parked}, reasonArg...)
			if err := scanRow(tx.QueryRow(ctx, sql, args...), &h, &n); err != nil {
				return err
			}
			n += restored
			if last && !opts.DryRun && res.Reopened+n > 0 {
				return wake.Notify(ctx, tx, c.schema, wake.Event{Name: c.name, Interval: c.interval, Reason: "reopen"})
			}
			return nil
		})
		res.Reopened += n
		res.Held = h.appendTo(res.Held, c.grid.Location())
		return err
	})
	return res, err
}
