package coverage

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
)

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
func (c *Client) Skip(ctx context.Context, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := input.CheckReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return WriteResult{}, err
	}
	reason := opts.Reason
	if reason == "" {
		reason = defaults.SkipReason
	}
	sql, reasonArg := c.sql.skip, []any{reason}
	if opts.DryRun {
		sql, reasonArg = c.sql.skipDry, nil // writes no message
	}
	var res WriteResult
	err = c.eachChunk(from, to, total, opts.Progress, func(p part, _ bool) error {
		var chunk WriteResult
		err := withConflictRetry(func(ignoreConflicts bool) error {
			chunk = WriteResult{}
			return c.inTx(ctx, writeSettings+inSlotOrder, opts.DryRun, func(tx pgx.Tx) error {
				chunk = WriteResult{}
				return c.skipChunk(ctx, tx, sql, reasonArg, p, reason, opts.DryRun, ignoreConflicts, &chunk)
			})
		})
		if err != nil {
			return err
		}
		res.Changed += chunk.Changed
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
func (c *Client) skipChunk(ctx context.Context, tx pgx.Tx, sql string, reasonArg []any, p part, reason string, dryRun, ignoreConflicts bool, sum *WriteResult) error {
	if err := c.lockSeries(ctx, tx); err != nil {
		return err
	}
	var h heldScan
	args := append([]any{c.name, c.interval, p.lo, p.hi}, reasonArg...)
	if err := scanRow(tx.QueryRow(ctx, sql, args...), &h,
		&sum.Changed, &sum.Complete, &sum.AlreadySkipped); err != nil {
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
	if b.len() > 0 {
		if sum.Inserted, err = c.insertMissing(ctx, tx, &b, statusSkip, &reason, ignoreConflicts); err != nil {
			return err
		}
	}
	sum.Changed += sum.Inserted
	return nil
}
