package slot_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	_ "time/tzdata" // the same zone rules on every machine that runs the tests

	"github.com/almanacdev/almanac/internal/testkit/longtest"
	"github.com/almanacdev/almanac/slot"
)

// Zones with the traps: DST at midnight, 30-minute DST, +05:45, a skipped
// day, southern-hemisphere DST, no DST, negative DST (Europe/Dublin's
// winter time is the "daylight" one in tzdata).
var trickyZones = []string{
	"UTC", "Europe/Berlin", "Europe/London", "Europe/Dublin", "America/New_York", "America/Santiago",
	"America/Havana", "America/St_Johns", "America/Sao_Paulo", "Australia/Lord_Howe", "Australia/Adelaide",
	"Asia/Kathmandu", "Asia/Kolkata", "Asia/Tehran", "Pacific/Apia", "Pacific/Kiritimati", "Pacific/Chatham",
	"Africa/Casablanca", "Antarctica/Troll", "Asia/Gaza", "America/Scoresbysund", "Pacific/Kwajalein",
}

var propertyIntervals = []string{
	"PT1S", "PT1M", "PT5M", "PT7M", "PT15M", "PT1H", "PT90M", "PT24H", "PT0.25S",
	"P1D", "P2D", "P1W", "P2W", "P1M", "P3M", "P1Y", "P1DT12H", "P1MT1H", "P1M7D",
}

// checkGrid asserts the grid properties around instant t of series s, and
// over [t, t+span). It returns a description of the first violation.
func checkGrid(s slot.Series, t time.Time, span time.Duration) string {
	fl, err := s.Floor(t)
	if err != nil {
		if errors.Is(err, slot.ErrRange) {
			return "" // near the limits
		}
		return "Floor: " + err.Error()
	}
	if fl.Start.After(t) || !t.Before(fl.End) {
		return "floor(t) <= t < end(floor(t)) fails for " + fl.String() + " at " + t.String()
	}
	if fl.Duration() <= 0 {
		return "empty slot " + fl.String()
	}
	if s.Interval().Fixed() && fl.Duration() != s.Interval().Clock() {
		return "clock slot of the wrong length " + fl.String()
	}
	byIndex, err := s.Slot(fl.Index)
	if err != nil || byIndex != fl {
		return "Slot(Index) differs from Floor: " + byIndex.String() + " " + fl.String()
	}
	if prev, err := s.Prev(fl); err == nil {
		if !prev.End.Equal(fl.Start) {
			return "prev does not end where the slot starts: " + prev.String()
		}
		if back, err := s.Next(prev); err != nil || back != fl {
			return "next(prev(s)) != s for " + fl.String()
		}
	}
	if next, err := s.Next(fl); err == nil {
		if !next.Start.Equal(fl.End) {
			return "next does not start where the slot ends: " + next.String()
		}
		if back, err := s.Prev(next); err != nil || back != fl {
			return "prev(next(s)) != s for " + fl.String()
		}
	}
	text := fl.String()
	if parsed, err := s.ParseSlot(text); err != nil || parsed != fl {
		return "parse(format(s)) != s for " + text
	}
	endForm := slot.FormatTime(fl.Start) + "/" + slot.FormatTime(fl.End)
	if parsed, err := s.ParseSlot(endForm); err != nil || parsed != fl {
		return "the start/end form does not parse back for " + endForm
	}
	utc := fl.Start.UTC().Format(time.RFC3339Nano) + "/" + s.Interval().String()
	if parsed, err := s.ParseSlot(utc); err != nil || parsed.String() != text {
		return "the UTC spelling " + utc + " does not parse to the same slot as " + text
	}

	// Counting is additive and agrees with iteration.
	end := t.Add(span)
	if end.After(slot.MaxTime()) {
		return ""
	}
	ac, err := s.Count(t, end)
	if err != nil {
		// Refused only when the range holds the start of a slot that would
		// end after MaxTime: the slot holding end's last microsecond.
		if _, ferr := s.Floor(end.Add(-time.Microsecond)); !errors.Is(err, slot.ErrRange) || !errors.Is(ferr, slot.ErrRange) {
			return "Count failed: " + err.Error()
		}
		return ""
	}
	mid := t.Add(span / 3)
	ab, err1 := s.Count(t, mid)
	bc, err2 := s.Count(mid, end)
	if err1 != nil || err2 != nil {
		return "Count failed on a part of a range it counted"
	}
	if ab+bc != ac {
		return "count(a,b)+count(b,c) != count(a,c)"
	}
	var n int64
	var last slot.Slot
	for sl := range s.Slots(t, end) {
		if sl.Start.Before(t) || !sl.Start.Before(end) {
			return "Slots yielded a slot outside the range: " + sl.String()
		}
		if n > 0 && !last.End.Equal(sl.Start) {
			return "Slots are not contiguous at " + sl.String()
		}
		if sl.Duration() <= 0 {
			return "Slots yielded an empty slot " + sl.String()
		}
		last = sl
		n++
	}
	if n != ac {
		return "Count disagrees with Slots"
	}
	return ""
}

func TestGridProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	locs := make([]*time.Location, len(trickyZones))
	for i, z := range trickyZones {
		locs[i] = zone(t, z)
	}
	lo := time.Date(1850, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	hi := time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	// 20,000 random series and instants before a release; a fixed sample
	// of the same stream otherwise.
	iterations := longtest.Pick(1500, 20000)
	if testing.Short() {
		iterations = min(iterations, 500)
	}
	for i := 0; i < iterations; i++ {
		loc := locs[rng.IntN(len(locs))]
		iv := mustInterval(propertyIntervals[rng.IntN(len(propertyIntervals))])
		var origin time.Time
		if rng.IntN(2) == 0 {
			origin = time.UnixMicro(lo + rng.Int64N(hi-lo))
		}
		s, err := slot.NewSeries("p", iv, loc, origin)
		if err != nil {
			t.Fatal(err)
		}
		at := time.UnixMicro(lo + rng.Int64N(hi-lo))
		if rng.IntN(4) == 0 {
			at = at.Add(time.Duration(rng.IntN(1000)) * time.Nanosecond) // off the microsecond grid
		}
		// Up to a few thousand slots, so iteration stays cheap.
		mean := iv.Clock() + time.Duration(iv.Days())*24*time.Hour + time.Duration(iv.Months())*730*time.Hour
		span := time.Duration(rng.Int64N(min(3000, int64(250*8760*time.Hour/mean)))) * mean
		if why := checkGrid(s, at, span); why != "" {
			t.Fatalf("%s at %s span %s: %s", s, at.Format(time.RFC3339Nano), span, why)
		}
	}
}

// TestGridAroundEveryTransition walks every offset change of the tricky
// zones between 1900 and 2040 and checks the grid just before, at and after
// each one, for daily, hourly and monthly series. Before a release
// (ALMANAC_LONG_TESTS) every transition is checked with every interval;
// otherwise each transition with one of them, in turn, so that every
// transition and every interval is still checked.
func TestGridAroundEveryTransition(t *testing.T) {
	intervals := []string{"P1D", "PT1H", "PT30M", "P1M", "P1W", "P1DT12H"}
	stride := longtest.Pick(len(intervals), 1)
	for zi, z := range trickyZones {
		loc := zone(t, z)
		for ii, ivText := range intervals {
			s, err := slot.NewSeries("t", mustInterval(ivText), loc, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			tm := time.Date(1900, 1, 1, 0, 0, 0, 0, loc)
			end := time.Date(2040, 1, 1, 0, 0, 0, 0, loc)
			for n := zi; tm.Before(end); n++ {
				_, next := tm.ZoneBounds()
				if next.IsZero() {
					break
				}
				if (n+ii)%stride != 0 {
					tm = next
					continue
				}
				for _, d := range []time.Duration{-25 * time.Hour, -time.Hour, -time.Microsecond, 0, time.Microsecond, time.Hour, 25 * time.Hour} {
					if why := checkGrid(s, next.Add(d), 72*time.Hour); why != "" {
						t.Fatalf("%s near %s: %s", s, next, why)
					}
				}
				tm = next
			}
		}
	}
}
