package almanac

import (
	"context"
	"time"

	"github.com/almanacdev/almanac/coverage"
)

// Heatmap is the coverage of a range in buckets: slots by state per bucket
// (complete, skipped, open, in flight, failed, parked, missing), their
// total, the oldest open slot and the last completion.
type Heatmap = coverage.Heatmap

// HeatmapBucket is one bucket of a Heatmap.
type HeatmapBucket = coverage.Bucket

// FailedSlot is a slot whose last run failed: in backoff, due for a retry,
// or parked.
type FailedSlot = coverage.FailedSlot

// The units of a Heatmap's buckets.
const (
	UnitSlot   = coverage.UnitSlot
	UnitMinute = coverage.UnitMinute
	UnitHour   = coverage.UnitHour
	UnitDay    = coverage.UnitDay
	UnitMonth  = coverage.UnitMonth
	UnitYear   = coverage.UnitYear
)

// MaxHeatmapBuckets bounds the buckets of Heatmap; MaxFailedSlots the limit
// of FailedSlots.
const (
	MaxHeatmapBuckets = coverage.MaxHeatmapBuckets
	MaxFailedSlots    = coverage.MaxFailedSlots
)

// Heatmap counts the slots of [from, to) by state in at most buckets
// buckets (1 to MaxHeatmapBuckets): single slots when they fit, else the
// finest calendar unit in the series' zone (minute, hour, day, month, year)
// that fits, so a day that daylight saving time shortens is one bucket of
// 23 hours. It reads the range once, in one statement answering one row per
// bucket (never one per slot): a coverage calendar of a million slots costs
// one index range scan. Errors for an invalid range or bucket count wrap
// ErrInvalid.
func (c *Client) Heatmap(ctx context.Context, s Series, from, to time.Time, buckets int) (Heatmap, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return Heatmap{}, err
	}
	return cov.Heatmap(ctx, from, to, buckets)
}

// FailedSlots returns up to limit (1 to MaxFailedSlots) slots of [from, to)
// whose last run failed, waiting for a retry or parked, with their
// messages, the latest failure first. Errors for an invalid range or limit
// wrap ErrInvalid.
func (c *Client) FailedSlots(ctx context.Context, s Series, from, to time.Time, limit int) ([]FailedSlot, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return nil, err
	}
	return cov.FailedSlots(ctx, from, to, limit)
}
