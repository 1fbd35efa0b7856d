package coverage

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/input"
)

// DefaultSkipReason is the message of skipped slots when SkipOptions.Reason
// is empty.
const DefaultSkipReason = "skipped"

// SkipOptions tune Skip. The zero value skips.
type SkipOptions struct {
	// Reason is stored in the message of every slot skipped and in its
	// history. Default DefaultSkipReason. It must pass input.CheckReason.
	Reason string
	// DryRun reports what would be skipped, and changes nothing.
	DryRun bool
	// Progress, if set, is called after each chunk.
	Progress ProgressFunc
}

// SkipResult says what Skip did. With DryRun, the counts say what it would
// do.
type SkipResult struct {
	// Skipped is the number of AVAILABLE slots marked SKIP (parked ones and
	// ones in backoff included).
	Skipped int64
	// Inserted is the number of missing slots inserted as SKIP.
	Inserted int64
	// Complete is the number of COMPLETE slots, left alone.
	Complete int64
	// AlreadySkipped is the number of slots that were SKIP already; their
	// message is kept.
	AlreadySkipped int64
	// Held lists, in slot order, the slots in flight, left alone: ACQUIRED
	// ones and AVAILABLE ones that another transaction (a locked-mode
	// worker) had locked.
	Held []Held
}

// Skip marks the slots of [from, to) SKIP with a reason, for intervals that
// need no processing (a holiday). Missing slots are inserted as SKIP, so the
// hole stays visible and distinguishable from a slot that was never
// created. COMPLETE slots are left alone and counted; slots in flight are
// left alone, never waited for, and listed in Held. Every slot skipped or
// inserted gets a 'skipped' event in its history, with the reason and the
// client's actor. Skip one slot with [sl.Start, sl.End).
//
// The range is worked in transactions of at most Options.ChunkSize slots,
// each holding the series' writer lock that Materialize takes, so the two
// never insert the same slot.
func (c *Client) Skip(ctx context.Context, from, to time.Time, opts SkipOptions) (SkipResult, error) {
	if err := input.CheckReason(opts.Reason); err != nil {
		return SkipResult{}, err
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return SkipResult{}, err
	}
	reason := opts.Reason
	if reason == "" {
		reason = DefaultSkipReason
	}
	sql, reasonArg := c.sql.skip, []any{reason, c.actor}
	if opts.DryRun {
		sql, reasonArg = c.sql.skipDry, nil // writes no message
	}
	var res SkipResult
	err = c.eachChunk(from, to, total, opts.Progress, func(p part, _ bool) error {
		var chunk SkipResult
		err := withConflictRetry(func(ignoreConflicts bool) error {
			chunk = SkipResult{}
			return c.inTx(ctx, writeSettings, opts.DryRun, func(tx pgx.Tx) error {
				chunk = SkipResult{}
				return c.skipChunk(ctx, tx, sql, reasonArg, p, reason, opts.DryRun, ignoreConflicts, &chunk)
			})
		})
		if err != nil {
			return err
		}
		res.Skipped += chunk.Skipped
		res.Inserted += chunk.Inserted
		res.Complete += chunk.Complete
		res.AlreadySkipped += chunk.AlreadySkipped
		res.Held = append(res.Held, chunk.Held...)
		return nil
	})
	return res, err
}

// skipChunk skips the slots of p in tx: the stored ones by sql, then the
// missing ones, found and inserted under the series' writer lock.
func (c *Client) skipChunk(ctx context.Context, tx pgx.Tx, sql string, reasonArg []any, p part, reason string, dryRun, ignoreConflicts bool, sum *SkipResult) error {
	if err := c.lockSeries(ctx, tx); err != nil {
		return err
	}
	var h heldScan
	args := append([]any{c.name, c.interval, p.lo, p.hi}, reasonArg...)
	if err := scanRow(tx.QueryRow(ctx, sql, args...), &h,
		&sum.Skipped, &sum.Complete, &sum.AlreadySkipped); err != nil {
		return err
	}
	sum.Held = h.appendTo(nil, c.grid.Location())
	gaps, err := c.searchGaps(ctx, tx, p)
	if err != nil {
		return err
	}
	b := c.newBatch()
	for _, g := range gaps {
		if dryRun {
			sum.Inserted += g.Slots
			continue
		}
		for sl := range c.grid.Slots(g.Start, g.End) {
			b.add(sl)
		}
	}
	if b.len() == 0 {
		return nil
	}
	sum.Inserted, err = c.insertMissing(ctx, tx, &b, StatusSkip, &reason, ignoreConflicts)
	return err
}
