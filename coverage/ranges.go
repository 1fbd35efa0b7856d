package coverage

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ranges a gap search need not read (see migration 003): stored ranges,
// whose every grid slot has a row, and compacted ranges, whose slots were
// finished and whose rows were deleted. Both are few (about one per gap or
// per compaction boundary), and neither is written when a slot is claimed
// or completed.

// span is a range [lo, hi) of the series.
type span struct{ lo, hi time.Time }

// coveredSQL returns the stored and compacted ranges of the series that
// overlap [$3, $4), by start.
const coveredSQL = `SELECT range_start, range_end FROM {{schema}}.slot_stored
	WHERE name = $1 AND "interval" = $2 AND range_start < $4 AND range_end > $3
UNION ALL
SELECT range_start, range_end FROM {{schema}}.slot_compacted
	WHERE name = $1 AND "interval" = $2 AND range_start < $4 AND range_end > $3
ORDER BY 1`

// lockDeletionsSQL locks the series' row and reads its deletion counter:
// a deleting transaction's trigger bumps the counter (taking the same row
// lock) before it cuts stored ranges, so it either came before, and
// changed the counter, or comes after, and sees the range recorded under
// the lock. Concurrent recorders queue on it too.
const lockDeletionsSQL = `SELECT slot_deletions FROM {{schema}}.series
	WHERE name = $1 AND "interval" = $2 FOR NO KEY UPDATE`

// recordStoredSQL records [$3, $4) as stored, merged with the stored
// ranges it overlaps or touches; nothing is written when a stored range
// holds [$3, $4) already. It must run after lockDeletionsSQL, in a
// statement of its own: its snapshot must be taken once the lock is held,
// to see the ranges another recorder committed meanwhile.
const recordStoredSQL = `WITH old AS (
	DELETE FROM {{schema}}.slot_stored d
	WHERE d.name = $1 AND d."interval" = $2 AND d.range_start <= $4 AND d.range_end >= $3
	  AND NOT EXISTS (SELECT 1 FROM {{schema}}.slot_stored
		WHERE name = $1 AND "interval" = $2 AND range_start <= $3 AND range_end >= $4)
	RETURNING d.range_start, d.range_end
)
INSERT INTO {{schema}}.slot_stored (name, "interval", range_start, range_end)
SELECT $1, $2, least($3::timestamptz, min(old.range_start)), greatest($4::timestamptz, max(old.range_end))
FROM old
HAVING NOT EXISTS (SELECT 1 FROM {{schema}}.slot_stored
	WHERE name = $1 AND "interval" = $2 AND range_start <= $3 AND range_end >= $4)`

const deletionsSQL = `SELECT slot_deletions FROM {{schema}}.series WHERE name = $1 AND "interval" = $2`

// covered returns the stored and compacted parts of [lo, hi), merged and
// clipped, in order.
func (c *Client) covered(ctx context.Context, q querier, lo, hi time.Time) ([]span, error) {
	rows, err := q.Query(ctx, c.sql.covered, planned(c.name, c.interval, lo, hi)...)
	if err != nil {
		return nil, err
	}
	var out []span
	var s span
	_, err = pgx.ForEachRow(rows, []any{&s.lo, &s.hi}, func() error {
		s.lo, s.hi = maxTime(s.lo, lo), minTime(s.hi, hi)
		if n := len(out); n > 0 && !out[n-1].hi.Before(s.lo) {
			out[n-1].hi = maxTime(out[n-1].hi, s.hi)
			return nil
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// uncovered returns the parts of p outside the covered spans (sorted,
// disjoint, within p), with their slot counts.
func (c *Client) uncovered(p part, cov []span) []part {
	var out []part
	add := func(lo, hi time.Time) {
		if lo.Before(hi) {
			want, _ := c.grid.Count(lo, hi) // within a validated range
			out = append(out, part{lo, hi, want})
		}
	}
	prev := p.lo
	for _, s := range cov {
		add(prev, s.lo)
		prev = maxTime(prev, s.hi)
	}
	add(prev, p.hi)
	return out
}

// deletions reads the series' deletion counter, which a materializer
// compares before recording a stored range.
func (c *Client) deletions(ctx context.Context, q querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, c.sql.deletions, c.name, c.interval).Scan(&n)
	return n, err
}

// recordStored records [from, to), just filled, as stored unless a
// deletion happened since the counter read mark.
func (c *Client) recordStored(ctx context.Context, from, to time.Time, mark int64) error {
	return c.inTx(ctx, writeSettings, false, func(tx pgx.Tx) error {
		var now int64
		if err := tx.QueryRow(ctx, c.sql.lockDeletions, c.name, c.interval).Scan(&now); err != nil || now != mark {
			return err
		}
		_, err := tx.Exec(ctx, c.sql.recordStored, c.name, c.interval, from, to)
		return err
	})
}

// compactedIn returns the compacted ranges overlapping [lo, hi), clipped.
type compactedSpan struct {
	span
	status      string
	generation  int64
	completedAt *time.Time
}

const compactedInSQL = `SELECT greatest(range_start, $3), least(range_end, $4), status, generation, completed_at
	FROM {{schema}}.slot_compacted
	WHERE name = $1 AND "interval" = $2 AND range_start < $4 AND range_end > $3
	ORDER BY range_start`

func (c *Client) compactedIn(ctx context.Context, q querier, lo, hi time.Time) ([]compactedSpan, error) {
	rows, err := q.Query(ctx, c.sql.compactedIn, planned(c.name, c.interval, lo, hi)...)
	if err != nil {
		return nil, err
	}
	var out []compactedSpan
	var s compactedSpan
	_, err = pgx.ForEachRow(rows, []any{&s.lo, &s.hi, &s.status, &s.generation, &s.completedAt}, func() error {
		out = append(out, s)
		return nil
	})
	return out, err
}

// dropCompacted removes from b the slots that lie in compacted ranges:
// they were compacted after the gap search that found them missing (the
// caller holds the series' writer lock, which compaction takes too, so the
// ranges read now cannot change before it commits). A compacted slot is
// finished and must never come back as new work but by a re-open.
func (c *Client) dropCompacted(ctx context.Context, tx pgx.Tx, b *batch) error {
	if b.len() == 0 {
		return nil
	}
	cs, err := c.compactedIn(ctx, tx, b.runs[0].lo, b.runs[len(b.runs)-1].hi)
	if err != nil || len(cs) == 0 {
		return err
	}
	runs := slices.Clone(b.runs)
	b.reset()
	for _, r := range runs {
		for sl := range c.grid.Slots(r.lo, r.hi) {
			if !slices.ContainsFunc(cs, func(s compactedSpan) bool { return !sl.Start.Before(s.lo) && sl.Start.Before(s.hi) }) {
				b.add(sl)
			}
		}
	}
	return nil
}
