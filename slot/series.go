package slot

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
	"time"

	"github.com/almanacdev/almanac/internal/input"
)

// Series is the grid of slots of one series: a name, an interval, a time
// zone and an origin. Slot n starts at origin + n·interval, where n·interval
// is computed from the origin every time, never by repeated addition: the
// calendar part (n·months, then n·days) is added to the origin's wall-clock
// reading in the zone, the result is resolved to an instant by the rules in
// the package documentation, and the clock part (n·clock) is added as
// absolute time. Slot n ends where slot n+1 starts.
//
// A Series is an immutable value, safe for concurrent use. The zero Series
// is invalid; obtain one from NewSeries.
type Series struct {
	name     string
	interval Interval
	loc      *time.Location
	origin   time.Time // in loc
	wall     civil     // origin's wall-clock reading in loc
}

// LoadZone returns the IANA time zone called name ("" means UTC). "Local" is
// refused: its meaning depends on the machine, and every instance of a
// fleet must compute the same slots. Errors wrap errZone.
//
// Slot boundaries follow the zone rules of the tz database the process
// loads (the system's, or the copy embedded by importing time/tzdata when
// the system has none). Instances of one fleet should run with the same
// tz database version, or a zone rule change could make them disagree about
// future boundaries in that zone.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%w %q: depends on the machine; expected an IANA name such as UTC or Europe/Berlin", errZone, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q: unknown; expected an IANA name such as UTC, Europe/Berlin or America/New_York", errZone, input.Abbreviate(name))
	}
	return loc, nil
}

// defaultOrigin returns the origin a series gets when none is given:
// 2000-01-01T00:00 local time in loc, or for intervals made only of weeks
// (P1W, P2W, P14D) Monday 2000-01-03T00:00, so weekly slots run Monday to
// Monday.
//
// The recent date is deliberate: clock intervals keep the alignment of the
// origin's offset, and several zones changed by a fraction of an hour before
// 2000 (Asia/Kathmandu went from +05:30 to +05:45 in 1986). With a 2000
// origin, PT1H slots in Kathmandu start on the local hour.
func defaultOrigin(iv Interval, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	day := 1
	if iv.weeksOnly() {
		day = 3
	}
	return resolve(civil{year: 2000, month: time.January, day: day}, loc)
}

// NewSeries returns the grid of series name with interval iv in loc (nil
// means UTC). A zero origin means defaultOrigin(iv, loc). The origin must be
// a whole number of microseconds, the precision PostgreSQL stores, and its
// slot (slot 0, [origin, origin + iv)) must lie within [MinTime(), MaxTime()].
// Errors wrap ErrInvalid.
//
// The name must satisfy CheckName except for its rule on invisible
// characters: a series another tool stored with such a name stays usable.
// Registering a new series (Client.Series in the root package, the
// scheduler, `almanac series add`) applies CheckName in full.
//
// In a zone whose DST shift is not a whole number of hours
// (Australia/Lord_Howe moves by 30 minutes), a clock interval such as PT1H
// keeps its absolute 3600-second spacing, so its slots start on the local
// hour in one season and at half past in the other. Choose a calendar
// interval (P1D) or accept the shifted alignment there.
func NewSeries(name string, iv Interval, loc *time.Location, origin time.Time) (Series, error) {
	if err := input.CheckStoredName(name); err != nil {
		return Series{}, err
	}
	if iv.IsZero() {
		return Series{}, fmt.Errorf("%w: zero interval; use ParseInterval", errInterval)
	}
	if loc == nil {
		loc = time.UTC
	}
	if loc.String() == "Local" {
		return Series{}, fmt.Errorf("%w %q: depends on the machine; expected an IANA zone", errZone, "Local")
	}
	if origin.IsZero() {
		origin = defaultOrigin(iv, loc)
	}
	if !inLimits(origin) {
		return Series{}, fmt.Errorf("%w: origin %s is outside the supported years 0001-01-02 to 9999-12-31", errTime, origin.Format(time.RFC3339))
	}
	if origin.Nanosecond()%1000 != 0 {
		return Series{}, fmt.Errorf("%w: origin %s is finer than a microsecond", errTime, origin.Format(time.RFC3339Nano))
	}
	origin = origin.In(loc)
	s := Series{name: name, interval: iv, loc: loc, origin: origin, wall: civilOf(origin)}
	if _, pos := s.start(1); pos != 0 {
		return Series{}, fmt.Errorf("%w: origin %s: its first %s slot would end after %s, the last supported instant; expected an origin at least one interval earlier",
			errTime, FormatTime(origin), iv, FormatTime(maxTime))
	}
	return s, nil
}

// Name returns the series name.
func (s Series) Name() string { return s.name }

// Interval returns the length of the series' slots.
func (s Series) Interval() Interval { return s.interval }

// Location returns the series' time zone.
func (s Series) Location() *time.Location { return s.loc }

// Origin returns the start of slot 0, in the series' zone.
func (s Series) Origin() time.Time { return s.origin }

// String describes the series, e.g. "sensor_report PT5M (UTC, origin
// 2000-01-01T00:00:00Z)", with the name as PrintableName shows it.
func (s Series) String() string {
	return fmt.Sprintf("%s %s (%s, origin %s)", input.PrintableName(s.name), s.interval, s.loc, FormatTime(s.origin))
}

// Slot returns slot n of the grid (slot 0 starts at the origin; n may be
// negative). It returns an error wrapping errRange when the slot lies outside
// [MinTime(), MaxTime()], and ErrNoSlot when the zone skipped slot n's local
// date entirely, leaving it empty.
func (s Series) Slot(n int64) (Slot, error) {
	start, pos := s.start(n)
	end, endPos := s.start(n + 1)
	if pos != 0 || endPos != 0 {
		return Slot{}, fmt.Errorf("%w: slot %d of %s lies outside the supported years 0001-01-02 to 9999-12-31", errRange, n, s.name)
	}
	if !end.After(start) {
		return Slot{}, fmt.Errorf("%w: slot %d of %s would start and end at %s because %s skipped that local date",
			ErrNoSlot, n, s.name, FormatTime(start), s.loc)
	}
	return Slot{Index: n, Start: start, End: end, Interval: s.interval}, nil
}

// Floor returns the slot that contains t: the one with Start <= t < End.
// It returns an error wrapping errRange when t or that slot lies outside
// [MinTime(), MaxTime()]. For clock intervals it costs O(1); for calendar
// intervals a few boundary computations around an estimate.
func (s Series) Floor(t time.Time) (Slot, error) {
	if !inLimits(t) {
		return Slot{}, fmt.Errorf("%w: %s is outside the supported years 0001-01-02 to 9999-12-31", errRange, t.Format(time.RFC3339))
	}
	return s.Slot(s.floorIndex(t))
}

// Next returns the slot that follows the one containing sl.Start.
func (s Series) Next(sl Slot) (Slot, error) {
	end, pos := s.start(s.floorIndex(sl.Start) + 1)
	if pos != 0 {
		return Slot{}, fmt.Errorf("%w: the slot after %s lies outside the supported years", errRange, sl)
	}
	return s.Floor(end)
}

// Prev returns the slot that precedes the one containing sl.Start.
func (s Series) Prev(sl Slot) (Slot, error) {
	first, _ := s.start(s.floorIndex(sl.Start))
	return s.Floor(first.Add(-time.Microsecond))
}

// Count validates the half-open range [from, to) and returns how many
// slots start in it, without iterating: O(1) for clock intervals, a few
// boundary computations for calendar ones. The range must not be reversed,
// must lie within [MinTime(), MaxTime()], and must not hold the start of a
// slot that ends after MaxTime() (such a slot does not exist: Slot returns
// an error for it); errors wrap ErrInvalid.
//
// No range can hold more slots than an int64 counts: the supported years
// span 3.2e17 microseconds, the shortest possible interval.
func (s Series) Count(from, to time.Time) (int64, error) {
	if to.Before(from) {
		return 0, fmt.Errorf("%w: reversed, from %s is after to %s", errRange, FormatTime(from), FormatTime(to))
	}
	for _, t := range []time.Time{from, to} {
		if !inLimits(t) {
			return 0, fmt.Errorf("%w: %s is outside the supported years 0001-01-02 to 9999-12-31", errRange, t.Format(time.RFC3339))
		}
	}
	n := s.count(from, to)
	if n > 0 {
		// Every slot starting in the range must end within the limits too,
		// or it would be counted here but could never be stored.
		last := s.floorIndex(justBefore(to))
		if _, pos := s.start(last + 1); pos != 0 {
			start, _ := s.start(last)
			return n, fmt.Errorf("%w: [%s, %s) holds the %s slot starting %s, which would end after %s, the last supported instant; expected an end at most %s",
				errRange, FormatTime(from), FormatTime(to), s.interval, FormatTime(start), FormatTime(maxTime), FormatTime(start))
		}
	}
	return n, nil
}

// Slots returns the slots that start in [from, to), in order, computed
// lazily: memory stays constant whatever the range. The iteration ends
// early at maxTime, and yields nothing for a reversed range or one outside
// the supported years; validate the range with Count first.
func (s Series) Slots(from, to time.Time) iter.Seq[Slot] {
	return func(yield func(Slot) bool) {
		if !from.Before(to) || !inLimits(from) || !inLimits(to) {
			return
		}
		n := s.floorIndex(justBefore(from)) + 1
		start, pos := s.start(n)
		for pos == 0 && start.Before(to) {
			end, endPos := s.start(n + 1)
			if endPos != 0 {
				return
			}
			if end.After(start) && !yield(Slot{Index: n, Start: start, End: end, Interval: s.interval}) {
				return
			}
			n, start = n+1, end
		}
	}
}

// count returns the number of non-empty slots starting in [from, to); the
// range has been validated.
func (s Series) count(from, to time.Time) int64 {
	if !from.Before(to) {
		return 0
	}
	a, b := s.floorIndex(justBefore(from)), s.floorIndex(justBefore(to))
	return b - a - s.emptiesIn(from, to)
}

// justBefore returns the last whole microsecond before t. Slot starts are
// whole microseconds, so start < t exactly when start <= justBefore(t).
func justBefore(t time.Time) time.Time {
	us := micros(t)
	if fromMicros(us).Equal(t) {
		us--
	}
	return fromMicros(us)
}

// start returns the start of slot n, and pos: 0 when it lies in
// [MinTime(), MaxTime()], -1 when before, +1 when after (the time is then zero).
// Starts never decrease as n grows.
func (s Series) start(n int64) (time.Time, int) {
	outside := 1
	if n < 0 {
		outside = -1
	}
	iv := s.interval
	var t time.Time
	switch {
	case iv.Fixed():
		// Any offset beyond ±4e17 µs (12,700 years) leaves the supported
		// years, and checking it first keeps the sum from overflowing.
		off, ok := mulInt64(n, iv.micros)
		if !ok || off > 4e17 || off < -4e17 {
			return time.Time{}, outside
		}
		t = fromMicros(micros(s.origin) + off)
	case n == 0:
		// The origin itself, even when its wall-clock reading is ambiguous
		// (the second 02:30 of a fall-back night) and resolve would pick the
		// first one.
		t = s.origin
	default:
		c, ok := s.wall, true
		if iv.months != 0 {
			m, okMul := mulInt64(n, iv.months)
			if !okMul {
				return time.Time{}, outside
			}
			c, ok = c.addMonths(m)
		}
		if ok && iv.days != 0 {
			d, okMul := mulInt64(n, iv.days)
			if !okMul {
				return time.Time{}, outside
			}
			c, ok = c.addDays(d)
		}
		if !ok {
			return time.Time{}, outside
		}
		t = resolve(c, s.loc)
		if iv.micros != 0 {
			off, okMul := mulInt64(n, iv.micros)
			if !okMul || off > 4e17 || off < -4e17 {
				return time.Time{}, outside
			}
			t = fromMicros(micros(t) + off)
		}
	}
	if t.Before(minTime) {
		return time.Time{}, -1
	}
	if t.After(maxTime) {
		return time.Time{}, 1
	}
	return t.In(s.loc), 0
}

// floorIndex returns the largest n whose start is at or before t. Such a slot
// is never empty: an empty slot shares its start with the next one.
func (s Series) floorIndex(t time.Time) int64 {
	iv := s.interval
	if iv.Fixed() {
		return floorDiv(micros(t)-micros(s.origin), iv.micros)
	}
	atOrBefore := func(n int64) bool {
		st, pos := s.start(n)
		return pos < 0 || pos == 0 && !st.After(t)
	}
	// Estimate from the mean length of the interval, then bracket the answer
	// by galloping and bisect. The estimate is off by a few slots at most
	// (month lengths, DST), so this costs a handful of boundary computations.
	mean := float64(iv.months)*2629746e6 + float64(iv.days)*86400e6 + float64(iv.micros)
	est := math.Floor(float64(micros(t)-micros(s.origin)) / mean)
	lo := int64(math.Max(math.Min(est, 1e15), -1e15))
	hi := lo + 1
	for step := int64(1); !atOrBefore(lo); step *= 2 {
		hi, lo = lo, lo-step
	}
	for step := int64(1); atOrBefore(hi); step *= 2 {
		lo, hi = hi, hi+step
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if atOrBefore(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// emptiesIn counts the empty slots (see ErrNoSlot) starting in [from, to).
// Only a series of whole days can have them, and only around an offset
// change of at least a day (Pacific/Apia skipped 2011-12-30), so this walks
// the zone's transitions in the range and looks at the few slots near each
// big one.
func (s Series) emptiesIn(from, to time.Time) int64 {
	iv := s.interval
	if iv.months != 0 || iv.micros != 0 {
		return 0
	}
	span := time.Duration(iv.days) * 24 * time.Hour
	var n int64
	t := from.Add(-48 * time.Hour)
	limit := to.Add(48 * time.Hour)
	for {
		_, end := t.In(s.loc).ZoneBounds()
		if end.IsZero() || !end.After(t) || !end.Before(limit) {
			return n
		}
		jump := time.Duration(offsetAt(end, s.loc)-offsetAt(end.Add(-time.Second), s.loc)) * time.Second
		if jump >= span {
			last := s.floorIndex(end.Add(jump + span))
			for k := s.floorIndex(end.Add(-time.Microsecond)); k < last; k++ {
				a, posA := s.start(k)
				b, posB := s.start(k + 1)
				if posA == 0 && posB == 0 && a.Equal(b) && !a.Before(from) && a.Before(to) {
					n++
				}
			}
		}
		t = end
	}
}

// mulInt64 returns a·b and whether it did not overflow.
func mulInt64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	neg := (a < 0) != (b < 0)
	ua, ub := uint64(a), uint64(b)
	if a < 0 {
		ua = uint64(-a)
	}
	if b < 0 {
		ub = uint64(-b)
	}
	hi, lo := bits.Mul64(ua, ub)
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	if neg {
		return -int64(lo), true
	}
	return int64(lo), true
}
