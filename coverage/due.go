package coverage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/seriesdb"
)

// dueSQL reads the database clock less the series' stored lag: a slot
// whose end is at or before it is due.
const dueSQL = `SELECT clock_timestamp() - coalesce(s.lag, interval '0') FROM {{schema}}.series s
	WHERE s.name = $1 AND s."interval" = $2`

// Due returns the start of the series' first slot that is not due yet: a
// slot is due once its end plus the series' stored lag (0 when none is
// stored) has passed on the database clock. Slots starting before it are
// due; a slot without a row that is not due is "not due yet", never
// missing (Status.NotDue, HeatmapBucket.NotDue). The worker's clock is
// never read. An unregistered series is an error wrapping
// almanac.ErrUnknownSeries.
func (c *Client) Due(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := c.inSnapshot(ctx, func(tx pgx.Tx) (err error) {
		t, err = c.dueIn(ctx, tx)
		return err
	})
	return t, err
}

// dueIn is Due on q, which may be a transaction.
func (c *Client) dueIn(ctx context.Context, q querier) (time.Time, error) {
	var at time.Time
	if err := q.QueryRow(ctx, c.sql.due, c.name, c.interval).Scan(&at); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: %q with interval %s", seriesdb.ErrUnknownSeries, c.name, c.interval)
		}
		return time.Time{}, err
	}
	return c.dueAfter(at), nil
}

// dueAfter is the start of the first slot whose end is after at: every
// slot before it ended at or before at.
func (c *Client) dueAfter(at time.Time) time.Time {
	sl, err := c.grid.Floor(at)
	if err != nil {
		return at.In(c.grid.Location()) // outside the supported years: a bound, not a boundary
	}
	return sl.Start
}

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
