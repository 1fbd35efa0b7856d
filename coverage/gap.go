package coverage

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/slot"
)

// Gap is a maximal run of missing slots: every slot starting in
// [Start, End) has no row, and the slots just before Start and at End (if
// in the range examined) exist.
type Gap struct {
	// Start is the start of the first missing slot, End the end of the last
	// one, both in the series' zone.
	Start, End time.Time
	// Slots is the number of missing slots in the gap.
	Slots int64
}

// Tuning of the gap search, chosen by measurement (see the package's
// benchmarks): one statement counting 1024 parts costs about what a single
// count of the whole range costs, and listing at most 64 starts per part keeps
// the rows sent to the client small.
const (
	maxParts   = 1024    // parts one range is split into per level
	listMax    = 64      // a part with at most this many slots is listed, not split
	windowSize = 1 << 20 // slots searched before the gaps found are yielded
)

// part is a sub-range [lo, hi) of a search and the number of slots that
// start in it.
type part struct {
	lo, hi time.Time
	want   int64
}

// Gaps yields the gaps of [from, to) in order. Memory is O(gaps found) —
// the range is searched in windows of about a million slots, each window's
// gaps yielded before the next is searched. Stored and compacted ranges
// (see the package documentation) are skipped unread, and compacted slots
// are never missing; elsewhere a range without gaps costs one index-only
// count per window.
//
// Each window is read from one snapshot, in a read-only transaction; a
// range of several windows is not. A row whose start is not a boundary of
// the grid (written by another tool) never fills a gap, but a count can be
// fooled when such rows exactly make up for missing ones in one part.
//
// An invalid range (reversed, outside the supported years) is yielded as an
// error wrapping slot.ErrInvalid; a database error ends the iteration.
func (c *Client) Gaps(ctx context.Context, from, to time.Time) iter.Seq2[Gap, error] {
	return func(yield func(Gap, error) bool) {
		from, to, total, err := c.checkRange(from, to)
		if err != nil {
			yield(Gap{}, err)
			return
		}
		var pending Gap
		for w := range splitRange(c.grid, part{from, to, total}, ceilDiv(total, windowSize)) {
			var found []Gap
			err := c.inSnapshot(ctx, func(tx pgx.Tx) (err error) {
				found, err = c.searchGaps(ctx, tx, w)
				return err
			})
			if err != nil {
				yield(Gap{}, err)
				return
			}
			for _, g := range found {
				if pending.Slots > 0 && pending.End.Equal(g.Start) {
					pending.End, pending.Slots = g.End, pending.Slots+g.Slots
					continue
				}
				if pending.Slots > 0 && !yield(pending, nil) {
					return
				}
				pending = g
			}
		}
		if pending.Slots > 0 {
			yield(pending, nil)
		}
	}
}

// searchGaps returns the gaps of p in order, adjacent ones merged. It
// examines the range level by level, with one counting statement and one
// listing statement per level however many parts the level has.
//
// The stored and compacted ranges of p (see migration 003) are skipped
// unread: the search costs O(gaps) where they cover the range.
func (c *Client) searchGaps(ctx context.Context, q querier, p part) ([]Gap, error) {
	var found []Gap
	cov, err := c.covered(ctx, q, p.lo, p.hi)
	if err != nil {
		return nil, err
	}
	frontier := c.uncovered(p, cov)
	for len(frontier) > 0 {
		var split, list []part
		for _, f := range frontier {
			switch {
			case f.want == 0:
			case f.want <= listMax:
				list = append(list, f)
			default:
				split = slices.AppendSeq(split, splitRange(c.grid, f, min(maxParts, ceilDiv(f.want, listMax))))
			}
		}
		listed, err := c.listGaps(ctx, q, list)
		if err != nil {
			return nil, err
		}
		found = append(found, listed...)
		have, err := c.countParts(ctx, q, split)
		if err != nil {
			return nil, err
		}
		frontier = frontier[:0]
		for i, s := range split {
			switch {
			case have[i] == s.want:
			case have[i] == 0:
				found = append(found, c.wholeGap(s))
			default:
				frontier = append(frontier, s)
			}
		}
	}
	slices.SortFunc(found, func(a, b Gap) int { return a.Start.Compare(b.Start) })
	return mergeGaps(found), nil
}

// countParts returns the number of rows starting in each part.
func (c *Client) countParts(ctx context.Context, q querier, parts []part) ([]int64, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	lo, hi := bounds(parts)
	rows, err := q.Query(ctx, c.sql.countParts, planned(c.name, c.interval, lo, hi)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// listGaps reads the starts stored in each part and returns the runs of grid
// slots among them that have no row.
func (c *Client) listGaps(ctx context.Context, q querier, parts []part) ([]Gap, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	lo, hi := bounds(parts)
	rows, err := q.Query(ctx, c.sql.listParts, planned(c.name, c.interval, lo, hi)...)
	if err != nil {
		return nil, err
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[[]time.Time])
	if err != nil {
		return nil, err
	}
	var gaps []Gap
	for k, p := range parts {
		stored := have[k]
		var run Gap
		for sl := range c.grid.Slots(p.lo, p.hi) {
			for len(stored) > 0 && stored[0].Before(sl.Start) {
				stored = stored[1:] // not a grid boundary
			}
			if len(stored) > 0 && stored[0].Equal(sl.Start) {
				if run.Slots > 0 {
					gaps = append(gaps, run)
					run = Gap{}
				}
				continue
			}
			if run.Slots == 0 {
				run.Start = sl.Start
			}
			run.End, run.Slots = sl.End, run.Slots+1
		}
		if run.Slots > 0 {
			gaps = append(gaps, run)
		}
	}
	return gaps, nil
}

// wholeGap is the gap made of every slot of p, which has at least one.
func (c *Client) wholeGap(p part) Gap {
	g := Gap{Slots: p.want}
	for sl := range c.grid.Slots(p.lo, p.hi) {
		g.Start = sl.Start
		break
	}
	// The slot holding the last microsecond before hi is the last one that
	// starts in p: non-empty slots tile time. Bounds are whole microseconds.
	last, err := c.grid.Floor(p.hi.Add(-time.Microsecond))
	if err == nil {
		g.End = last.End
	}
	return g
}

// mergeGaps joins gaps that touch; gaps must be sorted.
func mergeGaps(gaps []Gap) []Gap {
	out := gaps[:0]
	for _, g := range gaps {
		if n := len(out); n > 0 && out[n-1].End.Equal(g.Start) {
			out[n-1].End, out[n-1].Slots = g.End, out[n-1].Slots+g.Slots
			continue
		}
		out = append(out, g)
	}
	return out
}

// splitRange cuts p into n parts of equal duration (the last microsecond
// rounding aside) and counts the slots of each on the grid. The cuts need not
// be slot boundaries: a slot belongs to the part its start lies in.
func splitRange(grid slot.Series, p part, n int64) iter.Seq[part] {
	return func(yield func(part) bool) {
		if n <= 1 {
			yield(p)
			return
		}
		lo, span := p.lo.UnixMicro(), p.hi.UnixMicro()-p.lo.UnixMicro()
		n = min(n, max(span, 1))
		step, rest := span/n, span%n
		prev := p.lo
		for i := int64(1); i <= n; i++ {
			next := p.hi
			if i < n {
				next = time.UnixMicro(lo + step*i + rest*i/n)
			}
			want, _ := grid.Count(prev, next) // within a validated range
			if !yield(part{prev, next, want}) {
				return
			}
			prev = next
		}
	}
}

func bounds(parts []part) (lo, hi []time.Time) {
	lo, hi = make([]time.Time, len(parts)), make([]time.Time, len(parts))
	for i, p := range parts {
		lo[i], hi[i] = p.lo, p.hi
	}
	return lo, hi
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
