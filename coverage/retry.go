package coverage

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/wake"
)

// Retry makes the slots of [from, to) that wait for a retry acquirable now,
// and wakes idle workers once if there were any: slots in backoff (AVAILABLE
// with not_before in the future, by the database clock) and parked slots
// (not_before 'infinity'). Their not_before is cleared and their message
// kept; parked slots also get fail_count 0, so the retry policy starts
// afresh. Each gets a 'retried' event in its history, with the client's
// actor. Locked rows are skipped, never waited for, and listed in Held.
//
// Like Reopen, it works in chunks and notifies in the last chunk's
// transaction.
func (c *Client) Retry(ctx context.Context, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return WriteResult{}, err
	}
	sql := c.sql.retry
	if opts.DryRun {
		sql = c.sql.retryDry
	}
	var res WriteResult
	err = c.eachChunk(from, to, total, opts.Progress, func(p part, last bool) error {
		var n, unparked int64
		var h heldScan
		err := c.inTx(ctx, noWaitSettings+inSlotOrder, opts.DryRun, func(tx pgx.Tx) error {
			h = heldScan{}
			if err := scanRow(tx.QueryRow(ctx, sql, c.name, c.interval, p.lo, p.hi), &h, &n, &unparked); err != nil {
				return err
			}
			if last && !opts.DryRun && res.Changed+n > 0 {
				return wake.Notify(ctx, tx, c.schema, wake.Event{Name: c.name, Interval: c.interval, Reason: "retry"})
			}
			return nil
		})
		if err != nil {
			return err
		}
		res.Changed += n
		res.Unparked += unparked
		res.Held = h.appendTo(res.Held, c.grid.Location())
		return nil
	})
	return res, err
}
