package slot_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := slot.LoadZone(name)
	require.NoError(t, err)
	return loc
}

// series builds a series; origin "" means the default origin, otherwise it
// is parsed like a command-line time in the zone.
func series(t testing.TB, interval, zoneName, origin string) slot.Series {
	t.Helper()
	loc := zone(t, zoneName)
	var o time.Time
	if origin != "" {
		var err error
		o, err = slot.ParseTime(origin, loc)
		require.NoError(t, err)
	}
	s, err := slot.NewSeries("test", mustInterval(interval), loc, o)
	require.NoError(t, err)
	return s
}

func at(t testing.TB, text string, loc *time.Location) time.Time {
	t.Helper()
	tm, err := slot.ParseTime(text, loc)
	require.NoError(t, err)
	return tm
}

// texts lists the slots starting in [from, to) as text, with their lengths.
func texts(t testing.TB, s slot.Series, from, to string) []string {
	t.Helper()
	var out []string
	for sl := range s.Slots(at(t, from, s.Location()), at(t, to, s.Location())) {
		out = append(out, fmt.Sprintf("%s %s", sl, sl.Duration()))
	}
	return out
}

func TestCalendarCases(t *testing.T) {
	tests := []struct {
		name                   string
		interval, zone, origin string
		from, to               string // local times in the zone
		want                   []string
	}{
		{
			name: "P1D Europe/Berlin spring day is 23 h", interval: "P1D", zone: "Europe/Berlin",
			from: "2026-03-28", to: "2026-03-31",
			want: []string{
				"2026-03-28T00:00:00+01:00/P1D 24h0m0s",
				"2026-03-29T00:00:00+01:00/P1D 23h0m0s",
				"2026-03-30T00:00:00+02:00/P1D 24h0m0s",
			},
		},
		{
			name: "P1D Europe/Berlin autumn day is 25 h", interval: "P1D", zone: "Europe/Berlin",
			from: "2026-10-24", to: "2026-10-27",
			want: []string{
				"2026-10-24T00:00:00+02:00/P1D 24h0m0s",
				"2026-10-25T00:00:00+02:00/P1D 25h0m0s",
				"2026-10-26T00:00:00+01:00/P1D 24h0m0s",
			},
		},
		{
			name: "P1D America/New_York 2024-03-10 and 2024-11-03", interval: "P1D", zone: "America/New_York",
			from: "2024-03-10", to: "2024-03-11",
			want: []string{"2024-03-10T00:00:00-05:00/P1D 23h0m0s"},
		},
		{
			name: "P1D America/New_York fall back", interval: "P1D", zone: "America/New_York",
			from: "2024-11-03", to: "2024-11-04",
			want: []string{"2024-11-03T00:00:00-04:00/P1D 25h0m0s"},
		},
		{
			name: "PT1H across the Berlin spring change: 3600 s each, 02:00 never starts", interval: "PT1H", zone: "Europe/Berlin",
			from: "2026-03-29T00:00", to: "2026-03-29T05:00",
			want: []string{
				"2026-03-29T00:00:00+01:00/PT1H 1h0m0s",
				"2026-03-29T01:00:00+01:00/PT1H 1h0m0s",
				"2026-03-29T03:00:00+02:00/PT1H 1h0m0s",
				"2026-03-29T04:00:00+02:00/PT1H 1h0m0s",
			},
		},
		{
			name: "PT1H across the Berlin autumn change: 02:00 starts twice", interval: "PT1H", zone: "Europe/Berlin",
			from: "2026-10-25T01:00", to: "2026-10-25T04:00",
			want: []string{
				"2026-10-25T01:00:00+02:00/PT1H 1h0m0s",
				"2026-10-25T02:00:00+02:00/PT1H 1h0m0s",
				"2026-10-25T02:00:00+01:00/PT1H 1h0m0s",
				"2026-10-25T03:00:00+01:00/PT1H 1h0m0s",
			},
		},
		{
			name:     "P1D America/Santiago: local midnight does not exist on the DST day, the slot starts at 01:00",
			interval: "P1D", zone: "America/Santiago",
			from: "2026-09-05", to: "2026-09-08",
			want: []string{
				"2026-09-05T00:00:00-04:00/P1D 24h0m0s",
				"2026-09-06T01:00:00-03:00/P1D 23h0m0s",
				"2026-09-07T00:00:00-03:00/P1D 24h0m0s",
			},
		},
		{
			name: "P1D America/Havana: same rule", interval: "P1D", zone: "America/Havana",
			from: "2026-03-07", to: "2026-03-10",
			want: []string{
				"2026-03-07T00:00:00-05:00/P1D 24h0m0s",
				"2026-03-08T01:00:00-04:00/P1D 23h0m0s",
				"2026-03-09T00:00:00-04:00/P1D 24h0m0s",
			},
		},
		{
			name: "P1D Australia/Lord_Howe: 30-minute DST gives 23.5 h and 24.5 h days", interval: "P1D", zone: "Australia/Lord_Howe",
			from: "2026-04-05", to: "2026-04-06",
			want: []string{"2026-04-05T00:00:00+11:00/P1D 24h30m0s"},
		},
		{
			name: "P1D Australia/Lord_Howe spring", interval: "P1D", zone: "Australia/Lord_Howe",
			from: "2026-10-04", to: "2026-10-05",
			want: []string{"2026-10-04T00:00:00+10:30/P1D 23h30m0s"},
		},
		{
			name:     "PT1H Australia/Lord_Howe: on the hour in summer (+11), at half past in winter (+10:30)",
			interval: "PT1H", zone: "Australia/Lord_Howe",
			from: "2026-07-01T10:00", to: "2026-07-01T12:00",
			want: []string{
				"2026-07-01T10:30:00+10:30/PT1H 1h0m0s",
				"2026-07-01T11:30:00+10:30/PT1H 1h0m0s",
			},
		},
		{
			name:     "PT1H Asia/Kathmandu (+05:45) starts on the local hour with the 2000 origin",
			interval: "PT1H", zone: "Asia/Kathmandu",
			from: "2026-01-01T10:00", to: "2026-01-01T12:00",
			want: []string{
				"2026-01-01T10:00:00+05:45/PT1H 1h0m0s",
				"2026-01-01T11:00:00+05:45/PT1H 1h0m0s",
			},
		},
		{
			name: "P1M from a Jan 31 origin: Feb 28, Mar 31, Apr 30, no drift", interval: "P1M", zone: "UTC", origin: "2026-01-31",
			from: "2026-01-01", to: "2026-06-01",
			want: []string{
				"2026-01-31T00:00:00Z/P1M 672h0m0s",
				"2026-02-28T00:00:00Z/P1M 744h0m0s",
				"2026-03-31T00:00:00Z/P1M 720h0m0s",
				"2026-04-30T00:00:00Z/P1M 744h0m0s",
				"2026-05-31T00:00:00Z/P1M 720h0m0s",
			},
		},
		{
			name: "P1M from Jan 31 reaches Feb 29 in a leap year", interval: "P1M", zone: "UTC", origin: "2026-01-31",
			from: "2028-02-01", to: "2028-03-01",
			want: []string{"2028-02-29T00:00:00Z/P1M 744h0m0s"},
		},
		{
			name: "P1Y from Feb 29: Feb 28 in common years, Feb 29 again in leap years", interval: "P1Y", zone: "UTC", origin: "2024-02-29",
			from: "2024-01-01", to: "2029-01-01",
			want: []string{
				"2024-02-29T00:00:00Z/P1Y 8760h0m0s",
				"2025-02-28T00:00:00Z/P1Y 8760h0m0s",
				"2026-02-28T00:00:00Z/P1Y 8760h0m0s",
				"2027-02-28T00:00:00Z/P1Y 8784h0m0s",
				"2028-02-29T00:00:00Z/P1Y 8760h0m0s",
			},
		},
		{
			name: "P3M quarters in Berlin", interval: "P3M", zone: "Europe/Berlin",
			from: "2026-01-01", to: "2027-01-01",
			want: []string{
				"2026-01-01T00:00:00+01:00/P3M 2159h0m0s",
				"2026-04-01T00:00:00+02:00/P3M 2184h0m0s",
				"2026-07-01T00:00:00+02:00/P3M 2208h0m0s",
				"2026-10-01T00:00:00+02:00/P3M 2209h0m0s",
			},
		},
		{
			name: "P1W starts on Monday", interval: "P1W", zone: "Europe/Berlin",
			from: "2026-11-16", to: "2026-11-24",
			want: []string{
				"2026-11-16T00:00:00+01:00/P1W 168h0m0s",
				"2026-11-23T00:00:00+01:00/P1W 168h0m0s",
			},
		},
		{
			name: "P1W across the spring change is 167 h", interval: "P1W", zone: "Europe/Berlin",
			from: "2026-03-23", to: "2026-03-24",
			want: []string{"2026-03-23T00:00:00+01:00/P1W 167h0m0s"},
		},
		{
			// Slot n is origin + n days on the wall clock, then + n·12 h of
			// absolute time: slot 2 is Mar 29 00:00+01:00 plus 24 h, which
			// the DST change makes Mar 30 01:00+02:00.
			name: "P1DT12H mixes calendar days and absolute hours", interval: "P1DT12H", zone: "Europe/Berlin", origin: "2026-03-27",
			from: "2026-03-27", to: "2026-04-01",
			want: []string{
				"2026-03-27T00:00:00+01:00/P1DT12H 36h0m0s",
				"2026-03-28T12:00:00+01:00/P1DT12H 36h0m0s",
				"2026-03-30T01:00:00+02:00/P1DT12H 35h0m0s",
				"2026-03-31T12:00:00+02:00/P1DT12H 36h0m0s",
			},
		},
		{
			name: "P1D at 02:30 in New York: the missing reading moves forward", interval: "P1D", zone: "America/New_York", origin: "2024-03-01T02:30",
			from: "2024-03-09", to: "2024-03-12",
			want: []string{
				"2024-03-09T02:30:00-05:00/P1D 24h0m0s",
				"2024-03-10T03:30:00-04:00/P1D 23h0m0s",
				"2024-03-11T02:30:00-04:00/P1D 24h0m0s",
			},
		},
		{
			name: "P1D at 01:30 in New York: the repeated reading is the earlier instant", interval: "P1D", zone: "America/New_York", origin: "2024-03-01T01:30",
			from: "2024-11-02", to: "2024-11-05",
			want: []string{
				"2024-11-02T01:30:00-04:00/P1D 24h0m0s",
				"2024-11-03T01:30:00-04:00/P1D 25h0m0s",
				"2024-11-04T01:30:00-05:00/P1D 24h0m0s",
			},
		},
		{
			name: "P1D in Pacific/Apia: 2011-12-30 was skipped, so it has no slot", interval: "P1D", zone: "Pacific/Apia",
			from: "2011-12-29", to: "2012-01-01",
			want: []string{
				"2011-12-29T00:00:00-10:00/P1D 24h0m0s",
				"2011-12-31T00:00:00+14:00/P1D 24h0m0s",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := series(t, tt.interval, tt.zone, tt.origin)
			got := texts(t, s, tt.from, tt.to)
			require.Equal(t, tt.want, got)
			n, err := s.Count(at(t, tt.from, s.Location()), at(t, tt.to, s.Location()))
			require.NoError(t, err)
			require.Equal(t, int64(len(tt.want)), n, "Count agrees with iteration")
			for _, text := range got {
				var slotText string
				_, err := fmt.Sscan(text, &slotText)
				require.NoError(t, err)
				sl, err := s.ParseSlot(slotText)
				require.NoError(t, err)
				require.Equal(t, slotText, sl.String())
				fl, err := s.Floor(sl.Start)
				require.NoError(t, err)
				require.Equal(t, sl, fl)
				fl, err = s.Floor(sl.End.Add(-time.Microsecond))
				require.NoError(t, err)
				require.Equal(t, sl, fl)
			}
		})
	}
}

func TestLocalDaySlotCounts(t *testing.T) {
	tests := []struct {
		interval, zone, day string
		want                int64
	}{
		{"PT1H", "Europe/Berlin", "2026-03-29", 23},
		{"PT1H", "Europe/Berlin", "2026-10-25", 25},
		{"PT1H", "Europe/Berlin", "2026-06-01", 24},
		{"PT5M", "Europe/Berlin", "2026-03-29", 23 * 12},
		{"PT5M", "Europe/Berlin", "2026-10-25", 25 * 12},
		{"PT1H", "America/New_York", "2024-03-10", 23},
		{"PT1H", "America/New_York", "2024-11-03", 25},
		{"PT5M", "America/New_York", "2024-11-03", 25 * 12},
		{"PT30M", "Australia/Lord_Howe", "2026-10-04", 47},
		{"PT30M", "Australia/Lord_Howe", "2026-04-05", 49},
		{"PT1H", "Asia/Kathmandu", "2026-06-01", 24},
		{"P1D", "Europe/Berlin", "2026-03-29", 1},
	}
	for _, tt := range tests {
		t.Run(tt.interval+" "+tt.zone+" "+tt.day, func(t *testing.T) {
			s := series(t, tt.interval, tt.zone, "")
			from := at(t, tt.day, s.Location())
			y, m, d := from.Date()
			to := time.Date(y, m, d+1, 0, 0, 0, 0, s.Location())
			n, err := s.Count(from, to)
			require.NoError(t, err)
			require.Equal(t, tt.want, n)
			var seen int64
			for sl := range s.Slots(from, to) {
				seen++
				if s.Interval().Fixed() {
					require.Equal(t, s.Interval().Clock(), sl.Duration(), "clock slots are absolute, also across DST: %s", sl)
				}
			}
			require.Equal(t, tt.want, seen)
		})
	}
}

func TestFloorNextPrev(t *testing.T) {
	s := series(t, "PT5M", "UTC", "")
	sl, err := s.Floor(at(t, "2026-03-01T10:07:30.5Z", nil))
	require.NoError(t, err)
	require.Equal(t, "2026-03-01T10:05:00Z/PT5M", sl.String())
	require.True(t, sl.Contains(at(t, "2026-03-01T10:09:59.999999Z", nil)))
	require.False(t, sl.Contains(sl.End))
	next, err := s.Next(sl)
	require.NoError(t, err)
	require.Equal(t, "2026-03-01T10:10:00Z/PT5M", next.String())
	require.Equal(t, sl.Index+1, next.Index)
	prev, err := s.Prev(sl)
	require.NoError(t, err)
	require.Equal(t, "2026-03-01T10:00:00Z/PT5M", prev.String())

	zero, err := s.Slot(0)
	require.NoError(t, err)
	require.Equal(t, "2000-01-01T00:00:00Z/PT5M", zero.String())
	minus, err := s.Slot(-1)
	require.NoError(t, err)
	require.Equal(t, "1999-12-31T23:55:00Z/PT5M", minus.String())

	apia := series(t, "P1D", "Pacific/Apia", "")
	before, err := apia.Floor(at(t, "2011-12-29T12:00", apia.Location()))
	require.NoError(t, err)
	after, err := apia.Next(before)
	require.NoError(t, err)
	require.Equal(t, "2011-12-31T00:00:00+14:00/P1D", after.String(), "Next passes over the skipped date")
	back, err := apia.Prev(after)
	require.NoError(t, err)
	require.Equal(t, before, back)
	_, err = apia.Slot(before.Index + 1)
	require.ErrorIs(t, err, slot.ErrNoSlot)
}

func TestDefaultOrigin(t *testing.T) {
	for _, tt := range []struct{ interval, zone, want string }{
		{"PT5M", "UTC", "2000-01-01T00:00:00Z"},
		{"P1D", "Europe/Berlin", "2000-01-01T00:00:00+01:00"},
		{"P1W", "Europe/Berlin", "2000-01-03T00:00:00+01:00"},
		{"P2W", "UTC", "2000-01-03T00:00:00Z"},
		{"P7DT1H", "UTC", "2000-01-01T00:00:00Z"},
		{"P1M", "Asia/Kathmandu", "2000-01-01T00:00:00+05:45"},
	} {
		s := series(t, tt.interval, tt.zone, "")
		require.Equal(t, tt.want, slot.FormatTime(s.Origin()), "%s %s", tt.interval, tt.zone)
		require.Equal(t, time.Monday == s.Origin().Weekday(), tt.interval == "P1W" || tt.interval == "P2W")
	}
}

func TestOriginAmbiguousReadingIsKept(t *testing.T) {
	// The second 01:30 of the New York fall-back night: slot 0 starts there
	// exactly, although resolving that reading would give the first one.
	loc := zone(t, "America/New_York")
	origin := at(t, "2024-11-03T01:30:00-05:00", nil)
	s, err := slot.NewSeries("x", mustInterval("P1D"), loc, origin)
	require.NoError(t, err)
	zero, err := s.Slot(0)
	require.NoError(t, err)
	require.True(t, zero.Start.Equal(origin))
	require.Equal(t, "2024-11-04T01:30:00-05:00", slot.FormatTime(zero.End))
	minus, err := s.Slot(-1)
	require.NoError(t, err)
	require.Equal(t, "2024-11-02T01:30:00-04:00", slot.FormatTime(minus.Start))
	require.Equal(t, 25*time.Hour, minus.Duration())
}

func TestNewSeriesRejects(t *testing.T) {
	iv := mustInterval("PT5M")
	for _, tt := range []struct {
		name   string
		iv     slot.Interval
		loc    *time.Location
		origin time.Time
		want   error
	}{
		{"", iv, nil, time.Time{}, input.ErrName},
		{"a\x00b", iv, nil, time.Time{}, input.ErrName},
		{"tab\there", iv, nil, time.Time{}, input.ErrName},
		{"line\nbreak", iv, nil, time.Time{}, input.ErrName},
		{string(make([]byte, 201)), iv, nil, time.Time{}, input.ErrName},
		{"bad\xffutf8", iv, nil, time.Time{}, input.ErrName},
		{"ok", slot.Interval{}, nil, time.Time{}, slot.ErrInterval},
		{"ok", iv, time.Local, time.Time{}, slot.ErrZone},
		{"ok", iv, nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slot.ErrTime},
		{"ok", iv, nil, time.Date(1, 1, 1, 12, 0, 0, 0, time.UTC), slot.ErrTime},
		{"ok", iv, nil, time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC), slot.ErrTime},
	} {
		_, err := slot.NewSeries(tt.name, tt.iv, tt.loc, tt.origin)
		require.ErrorIs(t, err, tt.want, "%q", tt.name)
		require.ErrorIs(t, err, slot.ErrInvalid)
	}
	for _, ok := range []string{"report", "quote'd", `dq"`, "semi;colon", "Grüße", "名前", string(make([]byte, 0, 1)) + "x"} {
		_, err := slot.NewSeries(ok, iv, nil, time.Time{})
		require.NoError(t, err, "%q", ok)
	}
}

func TestLoadZone(t *testing.T) {
	loc, err := slot.LoadZone("")
	require.NoError(t, err)
	require.Equal(t, time.UTC, loc)
	for _, bad := range []string{"Local", "Mars/Olympus", "../etc/passwd", "europe/berlin", "UTC+1", "/etc/localtime"} {
		_, err := slot.LoadZone(bad)
		require.ErrorIs(t, err, slot.ErrZone, bad)
		require.Contains(t, err.Error(), bad)
	}
}

func TestRangesAndLimits(t *testing.T) {
	s := series(t, "PT5M", "UTC", "")
	from, to := at(t, "2026-01-01T00:00:00Z", nil), at(t, "2026-01-02T00:00:00Z", nil)
	n, err := s.Count(from, to)
	require.NoError(t, err)
	require.Equal(t, int64(288), n)
	_, err = s.Count(to, from)
	require.ErrorIs(t, err, slot.ErrRange)
	require.Contains(t, err.Error(), "reversed")
	n, err = s.Count(from, from)
	require.NoError(t, err)
	require.Zero(t, n)

	// The whole supported span at the shortest interval: counted in O(1)
	// and far below the int64 limit.
	tiny, err := slot.NewSeries("tiny", mustInterval("PT0.000001S"), nil, time.Time{})
	require.NoError(t, err)
	n, err = tiny.Count(slot.MinTime(), slot.MaxTime())
	require.NoError(t, err)
	require.Equal(t, slot.MaxTime().UnixMicro()-slot.MinTime().UnixMicro(), n)

	// Calendar intervals count without iterating too, across 9,998 years.
	// The last slot starting before maxTime (local midnight on 9999-12-31
	// in Berlin, 23:00 UTC the day before) would end after it: a range
	// holding its start is refused, one ending at its start is not.
	days := series(t, "P1D", "Europe/Berlin", "")
	_, err = days.Count(slot.MinTime(), slot.MaxTime())
	require.ErrorIs(t, err, slot.ErrRange)
	require.ErrorContains(t, err, "starting 9999-12-31T00:00:00+01:00")
	n, err = days.Count(slot.MinTime(), at(t, "9999-12-31", days.Location()))
	require.NoError(t, err)
	require.InDelta(t, float64(slot.MaxTime().Unix()-slot.MinTime().Unix())/86400, float64(n), 1)
	months := series(t, "P1M", "America/New_York", "2000-01-31")
	n, err = months.Count(slot.MinTime(), at(t, "9999-11-30", months.Location()))
	require.NoError(t, err)
	require.InDelta(t, 9998*12+11, float64(n), 1)

	_, err = s.Floor(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, slot.ErrRange)
	_, err = s.Floor(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, slot.ErrRange)
	_, err = s.Slot(1 << 62)
	require.ErrorIs(t, err, slot.ErrRange)
	_, err = months.Slot(-1 << 62)
	require.ErrorIs(t, err, slot.ErrRange)
	_, err = s.Count(from, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, slot.ErrRange)

	// Iteration stops at the end of the supported years instead of running on.
	yearly := series(t, "P1Y", "UTC", "")
	var last slot.Slot
	for sl := range yearly.Slots(at(t, "9990-01-01T00:00:00Z", nil), slot.MaxTime()) {
		last = sl
	}
	require.Equal(t, "9998-01-01T00:00:00Z/P1Y", last.String())
	for range yearly.Slots(to, from) {
		t.Fatal("a reversed range yields nothing")
	}
}

func TestSlotsStopsEarly(t *testing.T) {
	s := series(t, "PT1M", "UTC", "")
	var n int
	for range s.Slots(slot.MinTime(), slot.MaxTime()) {
		n++
		if n == 3 {
			break
		}
	}
	require.Equal(t, 3, n)
}
