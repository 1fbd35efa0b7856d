package almanac

import (
	"context"
	"time"

	"github.com/almanacdev/almanac/coverage"
)

// Heatmap is the coverage of a range in buckets of one unit (Unit, Step):
// slots by state per bucket, their total, the oldest open slot and the last
// completion. Its fields are documented at coverage.Heatmap.
type Heatmap = coverage.Heatmap

// HeatmapBucket is one bucket of a Heatmap: the slots starting in it by
// state (Complete, Skipped, Open, InFlight, Failed, Parked, Missing). Its
// fields are documented at coverage.HeatmapBucket.
type HeatmapBucket = coverage.HeatmapBucket

// Heatmap counts the slots of [from, to) by state in at most buckets
// buckets (1 to 10,000): single slots when they fit, else the finest
// calendar unit in the series' zone (minute, hour, day, month, year) that
// fits, so a day that daylight saving time shortens is one bucket of 23
// hours. It counts as Status does, never reading COMPLETE rows: missing
// slots by one gap search (which skips stored and compacted ranges), open,
// failed, parked, in-flight and skipped ones from their partial indexes,
// complete ones as what is left, so a calendar of a million slots costs
// O(gaps + open slots + buckets); compacted slots count as COMPLETE or SKIP,
// as they were. A range mostly outside stored and compacted ranges (rows
// written before schema version 3 or by another tool) is read row by row
// instead, in one statement answering one row per bucket. Errors for an
// invalid range or bucket count wrap ErrInvalid.
func (c *Client) Heatmap(ctx context.Context, s Series, from, to time.Time, buckets int) (Heatmap, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return Heatmap{}, err
	}
	return cov.Heatmap(ctx, from, to, buckets)
}
