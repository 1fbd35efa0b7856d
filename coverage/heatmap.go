package coverage

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

// Units of a heatmap's buckets (Heatmap.Unit), finest first.
const (
	unitSlot   = "slot"
	unitMinute = "minute"
	unitHour   = "hour"
	unitDay    = "day"
	unitMonth  = "month"
	unitYear   = "year"
)

// units are the calendar units with their nominal lengths, finest first.
var units = []struct {
	name    string
	nominal time.Duration
}{
	{unitMinute, time.Minute},
	{unitHour, time.Hour},
	{unitDay, 24 * time.Hour},
	{unitMonth, 31 * 24 * time.Hour},
	{unitYear, 366 * 24 * time.Hour},
}

// HeatmapBucket is one cell of a heatmap: the slots starting in [Start, End) by
// state. Slots = Complete + Skipped + Open + InFlight + Failed + Parked +
// Missing + NotDue.
type HeatmapBucket struct {
	// Start and End bound the bucket, in the series' zone.
	Start, End time.Time
	// Slots is the number of slots the grid has starting in the bucket.
	Slots int64
	// Complete and Skipped are the finished slots (COMPLETE, SKIP).
	Complete, Skipped int64
	// Open are AVAILABLE slots that have not failed since their last
	// success or re-open (waiting for a worker, snoozed, or held by a
	// locked-mode worker, whose row lock a read cannot see).
	Open int64
	// InFlight are slots held under a lease (ACQUIRED), expired or not.
	InFlight int64
	// Failed are AVAILABLE slots that failed and will be retried (in
	// backoff or due again); Parked those that gave up (see Client.Retry).
	Failed, Parked int64
	// Missing are the grid's slots without a row: the gaps (compacted
	// slots have no row but are not missing: they count as Complete or
	// Skipped, as they were). Only due slots can be missing.
	Missing int64
	// NotDue are the grid's slots without a row that are not due yet
	// (its end plus the series' lag has not passed on the database clock): the future, not a gap.
	NotDue int64
}

// Heatmap is the coverage of a range in buckets of one unit.
type Heatmap struct {
	// From and To are the range, in the series' zone.
	From, To time.Time
	// Unit is the buckets' unit, finest first: "slot", "minute", "hour",
	// "day", "month" or "year"; Step how many units one bucket spans (1 but
	// for long ranges in years). A bucket of a calendar unit starts at that
	// unit's local start in the series' zone (midnight, the first of the
	// month), so a day that daylight saving time shortens or lengthens is
	// one bucket of 23 or 25 hours.
	Unit string
	Step int
	// Buckets cover [From, To) in order; the first and last are cut to
	// the range.
	Buckets []HeatmapBucket
	// Total sums the buckets; its Start and End are From and To.
	Total HeatmapBucket
	// Due is the start of the series' first slot not due yet (its end
	// plus the series' lag has not passed on the database clock), in the
	// series' zone.
	Due time.Time
	// OldestOpen is the start of the first slot not finished (open, in
	// flight, failed or parked), zero if none; LastCompleted the
	// latest completion time of the COMPLETE slots, stored or compacted,
	// zero if none: as in Status.
	OldestOpen, LastCompleted time.Time
}

// Heatmap counts the slots of [from, to) by state in at most buckets
// buckets (1 to 10,000): single slots when the range holds no
// more than buckets of them, else the finest calendar unit longer than the
// interval (minute, hour, day, month, year) that fits, in the series' zone.
// Errors for an invalid range or bucket count wrap slot.ErrInvalid.
//
// It counts as Status does, from one snapshot, at O(gaps + open and
// skipped slots + buckets), never reading COMPLETE rows: the missing
// slots come from one gap search of the range (which skips stored and
// compacted ranges, see Gaps), split among the buckets; the open, in
// flight, failed, parked and skipped ones from the partial indexes, one
// row per bucket that has any; compacted SKIP runs add to Skipped; and
// Complete is what is left of each bucket's slots. Compacted slots count
// as they were, COMPLETE or SKIP. A row whose start is not a boundary of
// the grid (written by another tool) is counted only when open or
// skipped. LastCompleted is the latest completion time of the range's
// COMPLETE slots, stored or compacted, as in Status. Memory is O(gaps + buckets).
func (c *Client) Heatmap(ctx context.Context, from, to time.Time, buckets int) (Heatmap, error) {
	if buckets < 1 || buckets > defaults.MaxHeatmapBuckets {
		return Heatmap{}, input.Kind(fmt.Sprintf("heatmap buckets %d: expected 1 to %d", buckets, defaults.MaxHeatmapBuckets))
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return Heatmap{}, err
	}
	loc := c.grid.Location()
	h := Heatmap{From: from.In(loc), To: to.In(loc)}
	h.Unit, h.Step, h.Buckets = c.buckets(h.From, h.To, total, buckets)
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		cov, err := c.covered(ctx, tx, from, to)
		if err != nil {
			return err
		}
		cs, err := c.compactedIn(ctx, tx, from, to)
		if err != nil {
			return err
		}
		var outside int64
		for _, p := range c.uncovered(part{from, to, total}, cov) {
			outside += p.want
		}
		if outside > total/2 {
			err = c.heatmapAllRows(ctx, tx, &h, cs)
		} else {
			err = c.heatmapGapsAndRows(ctx, tx, &h, part{from, to, total})
		}
		if err != nil {
			return err
		}
		if err := c.heatmapNotDue(ctx, tx, &h); err != nil {
			return err
		}
		for _, s := range cs {
			if s.status == statusSkip {
				c.eachInBuckets(h.Buckets, s.span, func(b *HeatmapBucket, k int64) { b.Skipped += k })
			}
			if s.completedAt != nil && s.completedAt.After(h.LastCompleted) {
				h.LastCompleted = s.completedAt.In(loc)
			}
		}
		return nil
	})
	if err != nil {
		return Heatmap{}, err
	}
	h.Total = HeatmapBucket{Start: h.From, End: h.To}
	for i := range h.Buckets {
		b := &h.Buckets[i]
		b.Complete = max(0, b.Slots-b.Missing-b.NotDue-b.Skipped-b.Open-b.InFlight-b.Failed-b.Parked)
		h.Total.Slots += b.Slots
		h.Total.Complete += b.Complete
		h.Total.Skipped += b.Skipped
		h.Total.Open += b.Open
		h.Total.InFlight += b.InFlight
		h.Total.Failed += b.Failed
		h.Total.Parked += b.Parked
		h.Total.Missing += b.Missing
		h.Total.NotDue += b.NotDue
	}
	return h, nil
}

// heatmapGapsAndRows counts p, h's range, by a gap search and the open and
// skipped rows: the missing slots of its buckets, the open and skipped
// ones, the oldest open slot and the last completion.
func (c *Client) heatmapGapsAndRows(ctx context.Context, tx pgx.Tx, h *Heatmap, p part) error {
	gaps, err := c.missingIn(ctx, tx, p)
	if err != nil {
		return err
	}
	for _, g := range gaps {
		c.eachInBuckets(h.Buckets, span{g.Start, g.End}, func(b *HeatmapBucket, k int64) { b.Missing += k })
	}
	starts := make([]time.Time, len(h.Buckets))
	for i, b := range h.Buckets {
		starts[i] = b.Start
	}
	rows, err := tx.Query(ctx, c.sql.heatmapCounts, planned(c.name, c.interval, h.From, h.To, starts)...)
	if err != nil {
		return err
	}
	var i int
	var skipped, inFlight, failed, parked, available int64
	var oldest, last pgtype.Timestamptz
	_, err = pgx.ForEachRow(rows, []any{&i, &skipped, &inFlight, &failed, &parked, &available, &oldest, &last}, func() error {
		if i == 0 {
			h.LastCompleted = maxTime(h.LastCompleted, c.inZone(last))
			return nil
		}
		b := &h.Buckets[i-1]
		b.Skipped += skipped
		b.InFlight, b.Failed, b.Parked = inFlight, failed, parked
		b.Open = available - failed - parked
		if t := c.inZone(oldest); !t.IsZero() && (h.OldestOpen.IsZero() || t.Before(h.OldestOpen)) {
			h.OldestOpen = t
		}
		return nil
	})
	return err
}

// heatmapNotDue moves the missing slots of h's buckets that are not due
// yet from Missing to NotDue: a gap search of the part of the range after
// the due boundary, which is empty for a range in the past.
func (c *Client) heatmapNotDue(ctx context.Context, tx pgx.Tx, h *Heatmap) error {
	due, err := c.dueIn(ctx, tx)
	if err != nil {
		return err
	}
	h.Due = due
	lo := maxTime(due, h.From)
	if !lo.Before(h.To) {
		return nil
	}
	n, err := c.grid.Count(lo, h.To)
	if err != nil {
		return err
	}
	gaps, err := c.missingIn(ctx, tx, part{lo, h.To, n})
	if err != nil {
		return err
	}
	for _, g := range gaps {
		c.eachInBuckets(h.Buckets, span{g.Start, g.End}, func(b *HeatmapBucket, k int64) {
			k = min(k, b.Missing)
			b.Missing -= k
			b.NotDue += k
		})
	}
	return nil
}

// heatmapAllRows counts h's buckets by reading every row of its range:
// missing slots are the grid's slots without a row, less the compacted
// ones (cs), which have none; its skipped ones are added by the caller.
func (c *Client) heatmapAllRows(ctx context.Context, tx pgx.Tx, h *Heatmap, cs []compactedSpan) error {
	los := make([]time.Time, len(h.Buckets))
	his := make([]time.Time, len(h.Buckets))
	for i := range h.Buckets {
		b := &h.Buckets[i]
		los[i], his[i] = b.Start, b.End
		b.Missing = b.Slots // until its rows say otherwise
	}
	rows, err := tx.Query(ctx, c.sql.heatmapAllRows, planned(c.name, c.interval, h.From, h.To, los, his)...)
	if err != nil {
		return err
	}
	var i int
	var stored, complete, skipped, inFlight, failed, parked int64
	var oldest, last pgtype.Timestamptz
	_, err = pgx.ForEachRow(rows, []any{&i, &stored, &complete, &skipped, &inFlight, &failed, &parked, &oldest, &last}, func() error {
		b := &h.Buckets[i-1]
		b.Skipped, b.InFlight, b.Failed, b.Parked = skipped, inFlight, failed, parked
		b.Open = stored - complete - skipped - inFlight - failed - parked
		// Rows whose starts are off the grid (written by another tool)
		// can outnumber the grid's slots; a bucket never shows fewer
		// than zero missing.
		b.Missing = max(0, b.Slots-stored)
		if t := c.inZone(oldest); !t.IsZero() && (h.OldestOpen.IsZero() || t.Before(h.OldestOpen)) {
			h.OldestOpen = t
		}
		h.LastCompleted = maxTime(h.LastCompleted, c.inZone(last))
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range cs {
		c.eachInBuckets(h.Buckets, s.span, func(b *HeatmapBucket, k int64) { b.Missing -= min(k, b.Missing) })
	}
	return nil
}

// eachInBuckets calls fn with each bucket that s overlaps and the number
// of grid slots of s that start in it. Buckets tile their range in order;
// s lies within it.
func (c *Client) eachInBuckets(buckets []HeatmapBucket, s span, fn func(b *HeatmapBucket, slots int64)) {
	// The first bucket that ends after s starts.
	i, _ := slices.BinarySearchFunc(buckets, s.lo, func(b HeatmapBucket, t time.Time) int {
		if b.End.After(t) {
			return 1
		}
		return -1
	})
	for ; i < len(buckets) && buckets[i].Start.Before(s.hi); i++ {
		b := &buckets[i]
		if k, _ := c.grid.Count(maxTime(b.Start, s.lo), minTime(b.End, s.hi)); k > 0 { // within a validated range
			fn(b, k)
		}
	}
}

// buckets splits [from, to), which holds total slots, into at most max
// buckets with their grid slot counts.
func (c *Client) buckets(from, to time.Time, total int64, max int) (string, int, []HeatmapBucket) {
	var out []HeatmapBucket
	add := func(lo, hi time.Time) {
		n, _ := c.grid.Count(lo, hi)
		out = append(out, HeatmapBucket{Start: lo, End: hi, Slots: n})
	}
	if total <= int64(max) {
		for sl := range c.grid.Slots(from, to) {
			add(maxTime(sl.Start, from), minTime(sl.End, to))
		}
		return unitSlot, 1, out
	}
	length := longest(c.grid.Interval())
	span := to.Sub(from)
	for _, u := range units {
		// A unit no longer than the interval would show each slot in a
		// bucket of its own at best: the slots themselves did not fit.
		if u.name != unitYear && (u.nominal <= length || span/u.nominal+2 > time.Duration(max)) {
			continue
		}
		// Years always fit: in buckets of several when need be, found by
		// doubling (the alignment on multiples of step can add a bucket).
		for step := 1; ; step *= 2 {
			out = out[:0]
			for lo := from; lo.Before(to); {
				hi := minTime(nextUnit(u.name, step, lo), to)
				add(lo, hi)
				lo = hi
			}
			if len(out) <= max {
				return u.name, step, out
			}
		}
	}
	panic("unreachable: year buckets always fit")
}

// nextUnit returns the start of the unit (step years for unitYear) after
// the one containing t, in t's zone. Calendar units are found by their
// local date, so daylight saving time changes their length, not their
// alignment; minutes and hours are absolute, aligned on local clock
// boundaries.
func nextUnit(unit string, step int, t time.Time) time.Time {
	y, m, d := t.Date()
	loc := t.Location()
	var next time.Time
	switch unit {
	case unitMinute:
		next = t.Truncate(time.Second).Add(time.Duration(60-t.Second()) * time.Second)
	case unitHour:
		next = t.Truncate(time.Second).Add(time.Duration(3600-t.Minute()*60-t.Second()) * time.Second)
	case unitDay:
		next = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case unitMonth:
		next = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		next = time.Date((y/step+1)*step, 1, 1, 0, 0, 0, 0, loc)
	}
	if !next.After(t) {
		// A zone that skips a local midnight resolves it forward; never
		// stand still.
		next = t.Add(time.Hour)
	}
	return next
}

// longest returns the longest a slot of iv can last (a month counted as
// 31 days, a day as 24 hours), capped at about 290 years.
func longest(iv slot.Interval) time.Duration {
	const day = 24 * time.Hour
	const most = 290 * 366 * day
	days := iv.Months()*31 + iv.Days()
	if days > int64(most/day) {
		return most
	}
	return min(most, time.Duration(days)*day+iv.Clock())
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
