package coverage

import (
	"context"
	"time"

	"github.com/almanacdev/almanac/internal/seriesdb"
)

// dueIn returns the start of the series' first slot that is not due yet,
// read on q (which may be a transaction): a slot is due once its end plus
// the series' stored lag (0 when none is stored) has passed on the
// database clock (seriesdb.DueAt). Slots starting before it are due; a
// slot without a row that is not due is "not due yet", never missing
// (Status.NotDue, HeatmapBucket.NotDue).
func (c *Client) dueIn(ctx context.Context, q querier) (time.Time, error) {
	at, err := seriesdb.DueAt(ctx, q, c.schema, c.grid.Name(), c.grid.Interval())
	if err != nil {
		return time.Time{}, err
	}
	return c.dueAfter(at), nil
}

// dueAfter is the start of the first slot whose end is after at: every
// slot before it ended at or before at.
func (c *Client) dueAfter(at time.Time) time.Time { return seriesdb.DueFrom(c.grid, at) }

// splitDue cuts sorted gaps at due: the gaps before it (missing slots) and
// the number of slots after it (not due yet).
func (c *Client) splitDue(gaps []Gap, due time.Time) (missing []Gap, notDue int64) {
	for i, g := range gaps {
		if !g.End.After(due) {
			continue
		}
		if !g.Start.Before(due) {
			for _, rest := range gaps[i:] {
				notDue += rest.Slots
			}
			return gaps[:i], notDue
		}
		// due is a slot boundary inside g.
		k, _ := c.grid.Count(due, g.End) // within a validated range
		notDue = k
		for _, rest := range gaps[i+1:] {
			notDue += rest.Slots
		}
		out := append(gaps[:i:i], Gap{Start: g.Start, End: due, Slots: g.Slots - k})
		return out, notDue
	}
	return gaps, 0
}
