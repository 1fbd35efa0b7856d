package coverage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// Reopen makes the COMPLETE and SKIP slots of [from, to) AVAILABLE again
// for a backfill (see WriteOptions.States and Parked for other selections), and wakes idle
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
func (c *Client) Reopen(ctx context.Context, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := input.CheckReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return WriteResult{}, err
	}
	states := opts.States
	if len(states) == 0 {
		states = []string{statusComplete, statusSkip}
	}
	for _, s := range states {
		if s != statusComplete && s != statusSkip {
			return WriteResult{}, fmt.Errorf("%w: cannot re-open state %q; expected %s or %s", slot.ErrInvalid, s, statusComplete, statusSkip)
		}
	}
	reason := opts.Reason
	if reason == "" {
		reason = defaults.ReopenReason
	}
	sql, reasonArg := c.sql.reopen, []any{reason}
	if opts.DryRun {
		sql, reasonArg = c.sql.reopenDry, nil // writes no message
	}
	var res WriteResult
	err = c.eachChunk(from, to, total, opts.Progress, func(p part, last bool) error {
		var n int64
		var h heldScan
		err := c.inTx(ctx, noWaitSettings+inSlotOrder, opts.DryRun, func(tx pgx.Tx) error {
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
			if last && !opts.DryRun && res.Changed+n > 0 {
				return wake.Notify(ctx, tx, c.schema, wake.Event{Name: c.name, Interval: c.interval, Reason: "reopen"})
			}
			return nil
		})
		res.Changed += n
		res.Held = h.appendTo(res.Held, c.grid.Location())
		return err
	})
	return res, refusedDownstream(err)
}

// refusedDownstream turns the refusal of migration 10's reopen_downstream
// (a downstream series has compacted slots where the re-open would reach:
// they have no row to re-open) into an error wrapping slot.ErrInvalid, with
// the database's hint: the caller must re-open those slots first. Other
// errors are returned as they are.
func refusedDownstream(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55000" && strings.HasPrefix(pgErr.Message, "cannot re-open ") {
		return fmt.Errorf("%w: %s; %s", slot.ErrInvalid, pgErr.Message, pgErr.Hint)
	}
	return err
}
