package coverage

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// Materialize inserts every missing slot of [from, to) as AVAILABLE, with
// the grid's bounds, and wakes idle workers once if it inserted any. It
// records no history: a slot's created_at says when it was created.
//
// It finds the gaps first and inserts only those (re-inserting a million
// existing rows with ON CONFLICT DO NOTHING costs seconds), in transactions
// of at most Options.ChunkSize slots. Each chunk locks the series' row and
// re-counts its slots under it, so any number of processes may
// materialize overlapping ranges at once: every slot is inserted exactly
// once, without errors, and no one waits on a row a worker holds. Rows are
// never changed, whatever their state.
//
// Compacted slots (see Compact) count as existing: they are finished, and
// only a Reopen brings them back. Once the range is filled, it is recorded
// as stored (unless a slot of the series was deleted meanwhile), so later
// gap searches and Status skip it unread.
//
// Materialize is idempotent. If it fails midway, the chunks committed so far
// stay, and running it again inserts the rest. A new range is found fastest
// by Gaps once vacuumed; autovacuum does that after large inserts, or run
// VACUUM on the slot table yourself after a big backfill.
func (c *Client) Materialize(ctx context.Context, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := input.CheckReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return WriteResult{}, err
	}
	res := WriteResult{Slots: total}
	status, message := statusAvailable, (*string)(nil)
	if opts.Reason != "" {
		status, message = statusSkip, &opts.Reason
	}
	// Read before the gap search: the range filled is recorded as stored
	// only if no slot of the series was deleted since.
	var mark int64
	if !opts.DryRun {
		if err := c.inSnapshot(ctx, func(tx pgx.Tx) (err error) { mark, err = c.deletions(ctx, tx); return err }); err != nil {
			return res, err
		}
	}
	b := c.newBatch()
	flush := func(last bool) error {
		hi := b.runs[len(b.runs)-1].hi // b loses the slots compacted meanwhile
		n, err := c.insertBatch(ctx, &b, status, message, last && status == statusAvailable, res.Changed)
		res.Changed += n
		res.Inserted += n
		if err == nil && opts.Progress != nil {
			done, _ := c.grid.Count(from, hi)
			opts.Progress(done, total)
		}
		b.reset()
		return err
	}
	for g, err := range c.Gaps(ctx, from, to) {
		if err != nil {
			return res, err
		}
		if opts.DryRun {
			res.Changed += g.Slots
			res.Inserted += g.Slots
			continue
		}
		for sl := range c.grid.Slots(g.Start, g.End) {
			if b.len() == c.chunk {
				if err := flush(false); err != nil {
					return res, err
				}
			}
			b.add(sl)
		}
	}
	if b.len() > 0 {
		if err := flush(true); err != nil {
			return res, err
		}
	} else if opts.Progress != nil {
		opts.Progress(total, total)
	}
	if opts.DryRun || !from.Before(to) {
		return res, nil
	}
	return res, c.recordStored(ctx, from, to, mark)
}

// batch is one chunk of slots to insert: the runs of consecutive slots it is
// made of, by which it is re-counted under the lock, and, unless the
// database computes them (see Client.runsInSQL), every slot's bounds.
type batch struct {
	runs         []part
	starts, ends []time.Time
	n            int64
	bounds       bool
}

func (b *batch) len() int64 { return b.n }

func (b *batch) add(sl slot.Slot) {
	b.n++
	if b.bounds {
		b.starts, b.ends = append(b.starts, sl.Start), append(b.ends, sl.End)
	}
	if n := len(b.runs); n > 0 && b.runs[n-1].hi.Equal(sl.Start) {
		b.runs[n-1].hi = sl.End
		b.runs[n-1].want++
		return
	}
	b.runs = append(b.runs, part{sl.Start, sl.End, 1})
}

func (b *batch) reset() {
	b.starts, b.ends, b.runs, b.n = b.starts[:0], b.ends[:0], b.runs[:0], 0
}

// insertBatch inserts the slots of b that are still missing, with status
// and message, in one transaction holding the series' writer lock, and
// returns how many it inserted. When notify is set it also wakes workers if
// this or an earlier chunk of the call (earlier of them) inserted slots.
func (c *Client) insertBatch(ctx context.Context, b *batch, status string, message *string, notify bool, earlier int64) (int64, error) {
	var inserted int64
	err := withConflictRetry(func(ignoreConflicts bool) error {
		return c.inTx(ctx, writeSettings, false, func(tx pgx.Tx) error {
			if err := c.lockSeries(ctx, tx); err != nil {
				return err
			}
			n, err := c.insertMissing(ctx, tx, b, status, message, ignoreConflicts)
			if err != nil {
				return err
			}
			inserted = n
			if notify && earlier+n > 0 {
				return wake.Notify(ctx, tx, c.schema, wake.Event{Name: c.name, Interval: c.interval, Reason: "materialize"})
			}
			return nil
		})
	})
	return inserted, err
}

// withConflictRetry runs fn, and runs it again tolerating existing rows if
// it failed on a duplicate key: a writer that does not take the series lock
// (another tool) inserted some of the same slots meanwhile.
func withConflictRetry(fn func(ignoreConflicts bool) error) error {
	err := fn(false)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fn(true)
	}
	return err
}

// insertMissing inserts the slots of b that have no row, in tx, which holds
// the series' writer lock: the count it reads cannot change under it, except
// by writers that ignore the lock. SKIP slots are recorded in the history.
func (c *Client) insertMissing(ctx context.Context, tx pgx.Tx, b *batch, status string, message *string, ignoreConflicts bool) (int64, error) {
	if err := c.dropCompacted(ctx, tx, b); err != nil || b.len() == 0 {
		return 0, err
	}
	have, err := c.countParts(ctx, tx, b.runs)
	if err != nil {
		return 0, err
	}
	var existing int64
	for _, n := range have {
		existing += n
	}
	if existing >= b.len() {
		return 0, nil
	}
	// Only when another call inserted part of this chunk (rare) is the
	// slower conflict check worth paying.
	ignore := existing > 0 || ignoreConflicts
	pick := func(plain, plainOrIgnore, skip, skipOrIgnore string) string {
		switch {
		case status == statusSkip && ignore:
			return skipOrIgnore
		case status == statusSkip:
			return skip
		case ignore:
			return plainOrIgnore
		}
		return plain
	}
	var sql string
	var args []any
	if b.bounds {
		sql = pick(c.sql.insertSlots, c.sql.insertSlotsOrIgnore, c.sql.skipSlots, c.sql.skipSlotsOrIgnore)
		args = []any{c.name, c.interval, b.starts, b.ends, status, message}
	} else {
		sql = pick(c.sql.insertRuns, c.sql.insertRunsOrIgnore, c.sql.skipRuns, c.sql.skipRunsOrIgnore)
		lo, n := make([]time.Time, len(b.runs)), make([]int64, len(b.runs))
		for i, r := range b.runs {
			lo[i], n[i] = r.lo, r.want
		}
		args = []any{c.name, c.interval, lo, n, status, message, c.grid.Interval().Clock().Microseconds()}
	}
	if status != statusSkip {
		tag, err := tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	// SKIP slots are inserted AVAILABLE, then skipped: the skip is what
	// the history records (see touchInserted).
	args[4] = statusAvailable
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return c.touchInserted(ctx, tx, rows, c.sql.skipInserted)
}

// newBatch returns an empty batch for this client's series.
func (c *Client) newBatch() batch { return batch{bounds: !c.runsInSQL} }
