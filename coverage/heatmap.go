package coverage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// Units of a heatmap's buckets, finest first. A bucket of a calendar unit
// starts at that unit's local start in the series' zone (midnight, the first
// of the month), so a day that daylight saving time shortens or lengthens is
// one bucket of 23 or 25 hours.
const (
	UnitSlot   = "slot"
	UnitMinute = "minute"
	UnitHour   = "hour"
	UnitDay    = "day"
	UnitMonth  = "month"
	UnitYear   = "year"
)

// units are the calendar units with their nominal lengths, finest first.
var units = []struct {
	name    string
	nominal time.Duration
}{
	{UnitMinute, time.Minute},
	{UnitHour, time.Hour},
	{UnitDay, 24 * time.Hour},
	{UnitMonth, 31 * 24 * time.Hour},
	{UnitYear, 366 * 24 * time.Hour},
}

// MaxHeatmapBuckets bounds the buckets parameter of Heatmap.
const MaxHeatmapBuckets = 10_000

// Bucket is one cell of a heatmap: the slots starting in [Start, End) by
// state. Slots = Complete + Skipped + Open + InFlight + Failed + Parked +
// Missing.
type Bucket struct {
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
	// Missing are the grid's slots without a row: the gaps.
	Missing int64
}

// Heatmap is the coverage of a range in buckets of one unit.
type Heatmap struct {
	// From and To are the range, in the series' zone.
	From, To time.Time
	// Unit is the buckets' unit (UnitSlot, UnitMinute … UnitYear) and Step
	// how many units one bucket spans (1 but for long ranges in years).
	Unit string
	Step int
	// Buckets cover [From, To) in order; the first and last are cut to
	// the range.
	Buckets []Bucket
	// Total sums the buckets; its Start and End are From and To.
	Total Bucket
	// OldestOpen is the start of the first slot not finished (open, in
	// flight, failed or parked), zero if none; LastCompleted the latest
	// completion time of a COMPLETE slot, zero if none.
	OldestOpen, LastCompleted time.Time
}

// heatmapSQL counts the rows of each bucket [lo, hi) by state, one row per
// bucket that has rows, in one statement: each bucket is an index range of
// the primary key, read once. Missing slots are what the grid has and the
// rows do not (the caller's subtraction), so no row is ever made per slot.
// No clock is read: parked is not_before 'infinity', failed a failure count
// since the last success or re-open, whether its retry is due or not.
const heatmapSQL = `SELECT b.i, x.stored, x.complete, x.skipped, x.in_flight, x.failed, x.parked, x.oldest, x.last
FROM unnest($3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS b(lo, hi, i),
LATERAL (SELECT count(*) AS stored,
		count(*) FILTER (WHERE s.status = 'COMPLETE') AS complete,
		count(*) FILTER (WHERE s.status = 'SKIP') AS skipped,
		count(*) FILTER (WHERE s.status = 'ACQUIRED') AS in_flight,
		count(*) FILTER (WHERE s.status = 'AVAILABLE' AND s.fail_count > 0 AND s.not_before IS DISTINCT FROM 'infinity') AS failed,
		count(*) FILTER (WHERE s.status = 'AVAILABLE' AND s.not_before = 'infinity') AS parked,
		min(s.slot_start) FILTER (WHERE s.status IN ('AVAILABLE', 'ACQUIRED')) AS oldest,
		max(s.completed_at) AS last
	FROM {{schema}}.slot s
	WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start >= b.lo AND s.slot_start < b.hi) x
WHERE x.stored > 0
ORDER BY b.i`

// Heatmap counts the slots of [from, to) by state in at most buckets
// buckets (1 to MaxHeatmapBuckets): single slots when the range holds no
// more than buckets of them, else the finest calendar unit longer than the
// interval (minute, hour, day, month, year) that fits, in the series' zone.
// It reads the range's rows once, in one statement, and sends one row per
// bucket; memory is O(buckets). Errors for an invalid range or bucket
// count wrap slot.ErrInvalid.
func (c *Client) Heatmap(ctx context.Context, from, to time.Time, buckets int) (Heatmap, error) {
	if buckets < 1 || buckets > MaxHeatmapBuckets {
		return Heatmap{}, slot.NewInputError(fmt.Sprintf("heatmap buckets %d: expected 1 to %d", buckets, MaxHeatmapBuckets))
	}
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return Heatmap{}, err
	}
	loc := c.grid.Location()
	h := Heatmap{From: from.In(loc), To: to.In(loc)}
	h.Unit, h.Step, h.Buckets = c.buckets(h.From, h.To, total, buckets)
	los := make([]time.Time, len(h.Buckets))
	his := make([]time.Time, len(h.Buckets))
	for i, b := range h.Buckets {
		los[i], his[i] = b.Start, b.End
	}
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlschema.Render(heatmapSQL, c.schema), c.name, c.interval, los, his)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i int
			var stored int64
			var oldest, last pgtype.Timestamptz
			b := Bucket{}
			if err := rows.Scan(&i, &stored, &b.Complete, &b.Skipped, &b.InFlight, &b.Failed, &b.Parked, &oldest, &last); err != nil {
				return err
			}
			b.Open = stored - b.Complete - b.Skipped - b.InFlight - b.Failed - b.Parked
			p := &h.Buckets[i-1]
			p.Complete, p.Skipped, p.Open, p.InFlight, p.Failed, p.Parked = b.Complete, b.Skipped, b.Open, b.InFlight, b.Failed, b.Parked
			// Rows whose starts are off the grid (written by another tool)
			// can outnumber the grid's slots; a bucket never shows fewer
			// than zero missing.
			p.Missing = max(0, p.Slots-stored)
			if t := c.inZone(oldest); !t.IsZero() && (h.OldestOpen.IsZero() || t.Before(h.OldestOpen)) {
				h.OldestOpen = t
			}
			if t := c.inZone(last); t.After(h.LastCompleted) {
				h.LastCompleted = t
			}
		}
		return rows.Err()
	})
	if err != nil {
		return Heatmap{}, err
	}
	h.Total = Bucket{Start: h.From, End: h.To}
	for _, b := range h.Buckets {
		h.Total.Slots += b.Slots
		h.Total.Complete += b.Complete
		h.Total.Skipped += b.Skipped
		h.Total.Open += b.Open
		h.Total.InFlight += b.InFlight
		h.Total.Failed += b.Failed
		h.Total.Parked += b.Parked
		h.Total.Missing += b.Missing
	}
	return h, nil
}

// buckets splits [from, to), which holds total slots, into at most max
// buckets with their grid slot counts and every slot counted missing until
// the rows say otherwise.
func (c *Client) buckets(from, to time.Time, total int64, max int) (string, int, []Bucket) {
	var out []Bucket
	add := func(lo, hi time.Time) {
		n, _ := c.grid.Count(lo, hi)
		out = append(out, Bucket{Start: lo, End: hi, Slots: n, Missing: n})
	}
	if total <= int64(max) {
		for sl := range c.grid.Slots(from, to) {
			add(maxTime(sl.Start, from), minTime(sl.End, to))
		}
		return UnitSlot, 1, out
	}
	length := longest(c.grid.Interval())
	span := to.Sub(from)
	for _, u := range units {
		// A unit no longer than the interval would show each slot in a
		// bucket of its own at best: the slots themselves did not fit.
		if u.name != UnitYear && (u.nominal <= length || span/u.nominal+2 > time.Duration(max)) {
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

// nextUnit returns the start of the unit (step years for UnitYear) after
// the one containing t, in t's zone. Calendar units are found by their
// local date, so daylight saving time changes their length, not their
// alignment; minutes and hours are absolute, aligned on local clock
// boundaries.
func nextUnit(unit string, step int, t time.Time) time.Time {
	y, m, d := t.Date()
	loc := t.Location()
	var next time.Time
	switch unit {
	case UnitMinute:
		next = t.Truncate(time.Second).Add(time.Duration(60-t.Second()) * time.Second)
	case UnitHour:
		next = t.Truncate(time.Second).Add(time.Duration(3600-t.Minute()*60-t.Second()) * time.Second)
	case UnitDay:
		next = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case UnitMonth:
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
