package coverage

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/slot"
)

// compactSQL deletes the finished rows of [$3, $4) and returns them as
// maximal runs of adjacent slots of one state. The status test sits in
// the DELETE, so under READ COMMITTED a row re-opened meanwhile is re-read
// and kept; rows in flight (AVAILABLE, ACQUIRED) are never touched.
const compactSQL = `WITH gone AS (
	DELETE FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status IN ('COMPLETE', 'SKIP')
	RETURNING s.slot_start, s.slot_end, s.status, s.generation, s.completed_at
),
marked AS (
	SELECT g.*, CASE WHEN lag(g.slot_end) OVER w = g.slot_start AND lag(g.status) OVER w = g.status THEN 0 ELSE 1 END AS brk
	FROM gone g WINDOW w AS (ORDER BY g.slot_start)
),
runs AS (SELECT m.*, sum(m.brk) OVER (ORDER BY m.slot_start) AS run FROM marked m)
SELECT min(slot_start), max(slot_end), min(status), max(generation), max(completed_at), count(*)
FROM runs GROUP BY run ORDER BY 1`

const compactCountSQL = `SELECT count(*) FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status IN ('COMPLETE', 'SKIP')`

// mergeCompactedSQL adds runs ($3…$7: bounds, status, generation,
// completion) to the compacted ranges, merging every range of one state
// that overlaps or touches another within [$8, $9].
const mergeCompactedSQL = `WITH new AS (
	SELECT * FROM unnest($3::timestamptz[], $4::timestamptz[], $5::text[], $6::bigint[], $7::timestamptz[])
		AS n(lo, hi, status, generation, completed_at)
),
old AS (
	DELETE FROM {{schema}}.slot_compacted c
	WHERE c.name = $1 AND c."interval" = $2 AND c.range_start <= $9 AND c.range_end >= $8
	RETURNING c.range_start AS lo, c.range_end AS hi, c.status, c.generation, c.completed_at
),
a AS (SELECT * FROM new UNION ALL SELECT * FROM old),
marked AS (
	SELECT a.*, CASE WHEN a.lo <= max(a.hi) OVER (PARTITION BY a.status ORDER BY a.lo
		ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS brk
	FROM a
),
grouped AS (SELECT m.*, sum(m.brk) OVER (PARTITION BY m.status ORDER BY m.lo) AS grp FROM marked m)
INSERT INTO {{schema}}.slot_compacted (name, "interval", range_start, range_end, status, generation, completed_at)
SELECT $1, $2, min(lo), max(hi), status, max(generation), max(completed_at) FROM grouped GROUP BY status, grp`

const compactedCountSQL = `SELECT count(*) FROM {{schema}}.slot_compacted WHERE name = $1 AND "interval" = $2`

// Compact deletes the rows of the series' finished slots (COMPLETE and
// SKIP) that end at or before before, and records them as compacted
// ranges (table slot_compacted): maximal runs of adjacent slots of one
// state, merged with the ranges compacted earlier, so the table holds
// about one row per series and state change however many years are
// compacted. It bounds the slot table's size: run it on a retention, e.g.
// daily with before = now - 90 days (almanac compact --older-than 90d).
//
// Compacted slots stay finished for every reader and writer: gap searches
// and Status treat them as existing (COMPLETE or SKIP as they were),
// Materialize never inserts them again, so no worker can claim one, and a
// Reopen of any of them inserts their rows again, AVAILABLE, as a new
// generation (the next after the highest compacted), cutting the range.
// What is lost is their per-slot detail: attempts, data, messages, fences,
// and the completion of their last computation, which is recorded on the
// row (the rest of their history, in slot_event, is kept until
// PruneHistory removes it).
// Missing and open slots are never compacted, and break runs.
//
// The range is worked in transactions of at most Options.ChunkSize slots,
// each holding the series' writer lock that Materialize, Skip and Reopen
// take; if one fails, the chunks before it stay compacted. Rows whose
// bounds are not the grid's (written by another tool) are refused: the
// chunk is rolled back and an error wrapping slot.ErrInvalid names them.
func (c *Client) Compact(ctx context.Context, before time.Time, opts WriteOptions) (WriteResult, error) {
	last, err := c.grid.Floor(ceilMicro(before))
	if err != nil {
		return WriteResult{}, err
	}
	var first pgtype.Timestamptz
	if err := c.inSnapshot(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, c.sql.firstSlot, c.name, c.interval).Scan(&first)
	}); err != nil {
		return WriteResult{}, err
	}
	var res WriteResult
	if !first.Valid || !first.Time.Before(last.Start) {
		return res, nil
	}
	from, to, total, err := c.checkRange(first.Time, last.Start)
	if err != nil {
		return res, err
	}
	err = c.eachChunk(from, to, total, opts.Progress, func(p part, _ bool) error {
		var n int64
		err := c.inTx(ctx, writeSettings, opts.DryRun, func(tx pgx.Tx) error {
			if err := c.lockSeries(ctx, tx); err != nil {
				return err
			}
			if opts.DryRun {
				return tx.QueryRow(ctx, c.sql.compactCount, c.name, c.interval, p.lo, p.hi).Scan(&n)
			}
			var err error
			n, err = c.compactChunk(ctx, tx, p)
			return err
		})
		res.Changed += n
		return err
	})
	if err != nil || opts.DryRun {
		return res, err
	}
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, c.sql.compactedCount, c.name, c.interval).Scan(&res.Ranges)
	})
	return res, err
}

// compactChunk deletes the finished rows of p into compacted ranges, and
// returns how many it deleted.
func (c *Client) compactChunk(ctx context.Context, tx pgx.Tx, p part) (n int64, err error) {
	rows, err := tx.Query(ctx, c.sql.compact, c.name, c.interval, p.lo, p.hi)
	if err != nil {
		return 0, err
	}
	var lo, hi, done []time.Time
	var states []string
	var gens []int64
	var r struct {
		lo, hi time.Time
		status string
		gen    int64
		done   *time.Time
		n      int64
	}
	_, err = pgx.ForEachRow(rows, []any{&r.lo, &r.hi, &r.status, &r.gen, &r.done, &r.n}, func() error {
		if want, err := c.grid.Count(r.lo, r.hi); err != nil || want != r.n || !c.onGrid(r.lo) || !c.onGrid(r.hi) {
			return fmt.Errorf("%w: the %d slot rows of %s in [%s, %s) are not the grid's slots; cannot compact them",
				slot.ErrInvalid, r.n, c.grid, r.lo.In(c.grid.Location()).Format(time.RFC3339Nano), r.hi.In(c.grid.Location()).Format(time.RFC3339Nano))
		}
		lo, hi, states, gens = append(lo, r.lo), append(hi, r.hi), append(states, r.status), append(gens, r.gen)
		var d time.Time
		if r.done != nil {
			d = *r.done
		}
		done = append(done, d)
		n += r.n
		return nil
	})
	if err != nil || n == 0 {
		return 0, err
	}
	completed := make([]pgtype.Timestamptz, len(done))
	for i, d := range done {
		completed[i] = pgtype.Timestamptz{Time: d, Valid: !d.IsZero()}
	}
	_, err = tx.Exec(ctx, c.sql.mergeCompacted, c.name, c.interval, lo, hi, states, gens, completed, lo[0], hi[len(hi)-1])
	return n, err
}

// onGrid reports whether t is a slot boundary of the grid.
func (c *Client) onGrid(t time.Time) bool {
	sl, err := c.grid.Floor(t)
	return err == nil && sl.Start.Equal(t)
}

// restoreSQL cuts [$3, $4) out of the compacted ranges of states $5 and
// returns the parts cut out with their generation.
const restoreSQL = `WITH hit AS (
	DELETE FROM {{schema}}.slot_compacted c
	WHERE c.name = $1 AND c."interval" = $2 AND c.status = ANY($5::text[]) AND c.range_start < $4 AND c.range_end > $3
	RETURNING c.*
),
kept AS (
	INSERT INTO {{schema}}.slot_compacted (name, "interval", range_start, range_end, status, generation, completed_at, compacted_at)
	SELECT name, "interval", range_start, $3, status, generation, completed_at, compacted_at FROM hit WHERE range_start < $3
	UNION ALL
	SELECT name, "interval", $4, range_end, status, generation, completed_at, compacted_at FROM hit WHERE range_end > $4
)
SELECT greatest(range_start, $3), least(range_end, $4), generation FROM hit ORDER BY 1`

// restoreSlotsSQL inserts slots to be re-opened ($3 starts, $4 ends, $6
// the generations they had) as AVAILABLE with reason $5, and returns the
// starts of those it inserted; reopenInserted then starts their next
// generation, which the slot table's trigger records as their re-open.
const restoreSlotsSQL = `INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, message, generation)
	SELECT $1, $2, u.s, u.e, 'AVAILABLE', $5::text, u.g FROM unnest($3::timestamptz[], $4::timestamptz[], $6::bigint[]) AS u(s, e, g)
	ON CONFLICT DO NOTHING
	RETURNING slot_start`

// restoreDownstreamSQL re-opens what depends on the slots restored in the
// runs [$3[i], $4[i]), as an update of their rows would (the trigger
// slot_reopen_downstream, migration 10): rows brought back by INSERT do
// not fire it.
const restoreDownstreamSQL = `SELECT {{schema}}.reopen_downstream($1, $2, p.lo, p.hi)
	FROM unnest($3::timestamptz[], $4::timestamptz[]) AS p(lo, hi)`

// restoreCompacted brings back the compacted slots of states in p, in tx
// (which holds the series' writer lock), as AVAILABLE rows of the next
// generation with reason, re-opens what depends on them downstream, and
// returns how many; a dry run only counts them.
func (c *Client) restoreCompacted(ctx context.Context, tx pgx.Tx, p part, states []string, reason string, dryRun bool) (int64, error) {
	// Cut on slot boundaries, so the ranges kept stay on the grid.
	lo, hi := c.ceilBoundary(p.lo), c.ceilBoundary(p.hi)
	if !lo.Before(hi) {
		return 0, nil
	}
	if dryRun {
		cs, err := c.compactedIn(ctx, tx, lo, hi)
		var n int64
		for _, s := range cs {
			if slices.Contains(states, s.status) {
				k, _ := c.grid.Count(s.lo, s.hi) // within a validated range
				n += k
			}
		}
		return n, err
	}
	rows, err := tx.Query(ctx, c.sql.restore, c.name, c.interval, lo, hi, states)
	if err != nil {
		return 0, err
	}
	var starts, ends, los, his []time.Time
	var gens []int64
	var s span
	var gen int64
	_, err = pgx.ForEachRow(rows, []any{&s.lo, &s.hi, &gen}, func() error {
		los, his = append(los, s.lo), append(his, s.hi)
		for sl := range c.grid.Slots(s.lo, s.hi) {
			starts, ends, gens = append(starts, sl.Start), append(ends, sl.End), append(gens, gen)
		}
		return nil
	})
	if err != nil || len(starts) == 0 {
		return 0, err
	}
	rows, err = tx.Query(ctx, c.sql.restoreSlots, c.name, c.interval, starts, ends, reason, gens)
	if err != nil {
		return 0, err
	}
	n, err := c.touchInserted(ctx, tx, rows, c.sql.reopenInserted)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, c.sql.restoreDownstream, c.name, c.interval, los, his); err != nil {
		return 0, err
	}
	return n, nil
}

// touchInserted applies the change sql (a touchInserted statement) to the
// slots whose starts rows (of an insert) returns, and returns how many
// there are.
func (c *Client) touchInserted(ctx context.Context, tx pgx.Tx, rows pgx.Rows, sql string) (int64, error) {
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil || len(starts) == 0 {
		return 0, err
	}
	_, err = tx.Exec(ctx, sql, c.name, c.interval, starts)
	return int64(len(starts)), err
}

// ceilBoundary returns the first slot boundary at or after t.
func (c *Client) ceilBoundary(t time.Time) time.Time {
	sl, err := c.grid.Floor(t)
	if err != nil || sl.Start.Equal(t) {
		return t
	}
	return sl.End
}
