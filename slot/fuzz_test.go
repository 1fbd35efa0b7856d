package slot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/almanacdev/almanac/slot"
)

func fuzzZone(t *testing.T, i uint8) *time.Location {
	loc, err := slot.LoadZone(trickyZones[int(i)%len(trickyZones)])
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func oneLineInvalid(t *testing.T, in string, err error, kind error) {
	t.Helper()
	if !errors.Is(err, kind) || !errors.Is(err, slot.ErrInvalid) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error for %q is not a one-line %v: %v", in, kind, err)
	}
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-03-01T00:00:00Z", "2026-03-29T02:30", "2026-03-01", "2026-10-25T02:30:00+01:00",
		"2023-02-29", "2026-01-01T24:00", "10000-01-01", "0001-01-01T00:00:00Z", "2026-01-01T00:00:00.1234567Z",
		"9999-12-31T00:00:00Z", "2026-01-01T00:00:00+14:00", "2026-01-01t00:00:00z", "2026-01-01 00:00:00Z"} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, in string, z uint8) {
		loc := fuzzZone(t, z)
		tm, err := slot.ParseTime(in, loc)
		if err != nil {
			oneLineInvalid(t, in, err, slot.ErrTime)
			return
		}
		if tm.Before(slot.MinTime()) || tm.After(slot.MaxTime()) || tm.Nanosecond()%1000 != 0 {
			t.Fatalf("%q parsed to %v, outside the limits or finer than a microsecond", in, tm)
		}
		text := slot.FormatTime(tm.In(loc))
		again, err := slot.ParseTime(text, nil)
		if err != nil || !again.Equal(tm) {
			t.Fatalf("%q → %s does not parse back: %v %v", in, text, again, err)
		}
	})
}

func FuzzParseSlot(f *testing.F) {
	for _, s := range []string{"2026-03-01T00:00:00Z/PT5M", "2026-03-01T00:05:00Z/2026-03-01T00:10:00Z",
		"2026-03-29T00:00:00+01:00/P1D", "2026-03-01T00:00:00Z/PT10M", "2026-03-01T00:01:00Z/PT5M",
		"2026-03-01T00:00:00/PT5M", "/", "2026-03-01T00:00:00Z/", "2026-03-01T00:00:00Z/PT5M/PT5M"} {
		f.Add(s, uint8(0), uint8(2))
	}
	f.Fuzz(func(t *testing.T, in string, z, i uint8) {
		iv := mustInterval(propertyIntervals[int(i)%len(propertyIntervals)])
		s, err := slot.NewSeries("f", iv, fuzzZone(t, z), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		sl, err := s.ParseSlot(in)
		if err != nil {
			oneLineInvalid(t, in, err, slot.ErrSlot)
			return
		}
		fl, err := s.Floor(sl.Start)
		if err != nil || fl != sl {
			t.Fatalf("%q parsed to %v, which is not a slot of the grid (%v)", in, sl, err)
		}
		again, err := s.ParseSlot(sl.String())
		if err != nil || again != sl {
			t.Fatalf("%q → %s does not parse back: %v", in, sl, err)
		}
	})
}

// FuzzGrid drives the grid properties with fuzzed zones, intervals, origins
// and instants.
func FuzzGrid(f *testing.F) {
	f.Add(uint8(1), uint8(9), int64(0), int64(1774742400000000), uint16(100))
	f.Add(uint8(14), uint8(9), int64(0), int64(1325239200000000), uint16(5))
	f.Add(uint8(9), uint8(13), int64(949276800000000), int64(1800000000000000), uint16(30))
	f.Fuzz(func(t *testing.T, z, i uint8, originMicros, atMicros int64, slots uint16) {
		const lo, hi = -62135510400000000, 253402128000000000 // minTime and maxTime in Unix µs
		iv := mustInterval(propertyIntervals[int(i)%len(propertyIntervals)])
		var origin time.Time
		if originMicros != 0 {
			origin = time.UnixMicro(lo + mod(originMicros, hi-lo))
		}
		s, err := slot.NewSeries("f", iv, fuzzZone(t, z), origin)
		if err != nil {
			// Refused only when the origin's slot would end after maxTime.
			if !errors.Is(err, slot.ErrTime) || slot.MaxTime().Sub(origin) > 400*24*time.Hour {
				t.Fatal(err)
			}
			return
		}
		at := time.UnixMicro(lo + mod(atMicros, hi-lo))
		mean := iv.Clock() + time.Duration(iv.Days())*24*time.Hour + time.Duration(iv.Months())*730*time.Hour
		span := time.Duration(min(int64(slots%2000), int64(250*8760*time.Hour/mean))) * mean
		if why := checkGrid(s, at, span); why != "" {
			t.Fatalf("%s at %s span %s: %s", s, at.Format(time.RFC3339Nano), span, why)
		}
	})
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// FuzzCheckTime: CheckTime accepts every text ParseTime reads in some zone,
// and refuses only texts ParseTime refuses in every zone.
func FuzzCheckTime(f *testing.F) {
	for _, s := range []string{"2026-03-01", "20260301", "20260301T0600Z", "2026-03-01T25:00", "9999-12-31T10:00", "0001-01-01T20:00",
		"2026-03-01T00:00:00+01:00", "10000-01-01", "2026030", "yesterday", ""} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, in string, z uint8) {
		checkErr := slot.CheckTime(in)
		_, parseErr := slot.ParseTime(in, fuzzZone(t, z))
		if checkErr != nil {
			oneLineInvalid(t, in, checkErr, slot.ErrTime)
			if parseErr == nil {
				t.Fatalf("CheckTime refuses %q (%v), ParseTime reads it", in, checkErr)
			}
		}
		if parseErr != nil {
			oneLineInvalid(t, in, parseErr, slot.ErrTime)
		}
	})
}

// FuzzLoadZone: the --tz flag. A zone is accepted only under its own name.
func FuzzLoadZone(f *testing.F) {
	for _, s := range []string{"UTC", "", "Europe/Berlin", "Local", "../etc/passwd", "/etc/localtime", "Mars/Base", "europe/berlin", "EST5EDT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		loc, err := slot.LoadZone(name)
		if err != nil {
			oneLineInvalid(t, name, err, slot.ErrZone)
			return
		}
		if name != "" && loc.String() != name || name == "Local" {
			t.Fatalf("%q loaded as %s", name, loc)
		}
	})
}
