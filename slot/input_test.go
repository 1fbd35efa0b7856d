package slot_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/slot"
)

// Hostile and careless input to the slot model: every value that cannot be
// represented faithfully is refused with one line naming it and the limit.

// TestSeriesLoadedWithInvisibleNames: a series some other tool stored with
// such a name must stay usable (it can be listed, escaped, and worked on);
// only registering new ones is refused.
func TestSeriesLoadedWithInvisibleNames(t *testing.T) {
	_, err := slot.NewSeries("report\u200b", mustInterval("PT5M"), nil, time.Time{})
	require.NoError(t, err)
}

// TestIntervalLongerThanTheLimit: P8000Y was accepted, and its only slot
// starting in 2000 ended in the year 10000, which no boundary may reach; the
// series then counted a slot that could never be stored. An interval is at
// most P1000Y long, so the supported years hold several of its slots.
func TestIntervalLongerThanTheLimit(t *testing.T) {
	for _, ok := range []string{"P1000Y", "P12000M", "P999Y11M", "P52177W", "P365242D", "P999YT8765H"} {
		_, err := slot.ParseInterval(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"P8000Y", "P1001Y", "P12001M", "P1000Y1D", "P365243D", "P52178W", "P999Y12M1D", "P1000YT1S", "P9999Y"} {
		_, err := slot.ParseInterval(bad)
		require.ErrorIs(t, err, slot.ErrInterval, bad)
		require.Contains(t, err.Error(), "P1000Y", "%s: the message names the limit", bad)
		require.Contains(t, err.Error(), `"`+bad+`"`)
	}
}

// TestOriginWhoseFirstSlotDoesNotFit: an origin is refused when even its
// first slot would end after maxTime.
func TestOriginWhoseFirstSlotDoesNotFit(t *testing.T) {
	yearly := mustInterval("P1Y")
	_, err := slot.NewSeries("x", yearly, nil, time.Date(9999, 6, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, slot.ErrTime)
	require.Contains(t, err.Error(), "9999-06-01T00:00:00Z")
	require.Contains(t, err.Error(), "9999-12-31")
	_, err = slot.NewSeries("x", yearly, nil, time.Date(9998, 12, 30, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	_, err = slot.NewSeries("x", mustInterval("P1000Y"), nil, time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, slot.ErrTime)
}

// TestRangeHoldingASlotBeyondTheLimit: a range that holds the start of a
// slot ending after maxTime was counted with that slot although it can
// never be stored (Slots leaves it out), so materialize said it "existed".
// Such a range is refused, naming the last slot that fits.
func TestRangeHoldingASlotBeyondTheLimit(t *testing.T) {
	yearly := series(t, "P1Y", "UTC", "")
	from := at(t, "9990-01-01T00:00:00Z", nil)
	_, err := yearly.Count(from, at(t, "9999-06-01T00:00:00Z", nil))
	require.ErrorIs(t, err, slot.ErrRange)
	require.Contains(t, err.Error(), "9999-01-01T00:00:00Z")
	require.Contains(t, err.Error(), "9999-12-31")
	n, err := yearly.Count(from, at(t, "9999-01-01T00:00:00Z", nil))
	require.NoError(t, err)
	require.EqualValues(t, 9, n)
	var slots int64
	for range yearly.Slots(from, at(t, "9999-01-01T00:00:00Z", nil)) {
		slots++
	}
	require.Equal(t, n, slots, "Count and Slots agree")
}

// TestParseTimeSaysHowItRead: a date in the ISO 8601 basic format was
// described as a year with more than four digits; a local time is read in
// a zone, and errors about it name that zone.
func TestParseTimeSaysHowItRead(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	for _, tt := range []struct{ in, want string }{
		{"20260301", "write it as 2026-03-01"},
		{"20260301T0600", "write it as 2026-03-01T06:00"},
		{"20260301T060030Z", "write it as 2026-03-01T06:00:30Z"},
		{"2026030", "expected RFC 3339"},
		{"10000-01-01", "year has more than four digits"},
	} {
		_, err := slot.ParseTime(tt.in, berlin)
		require.ErrorIs(t, err, slot.ErrTime, tt.in)
		require.Contains(t, err.Error(), tt.want, tt.in)
	}
	// A local reading outside the limits names the zone it was read in.
	_, err := slot.ParseTime("9999-12-31T02:00", zone(t, "America/New_York"))
	require.ErrorContains(t, err, "read in America/New_York")
	require.ErrorContains(t, err, "9999-12-31T07:00:00Z")
	// A syntax error does not depend on the zone and names none.
	_, err = slot.ParseTime("2026-03-01T25:00", berlin)
	require.ErrorIs(t, err, slot.ErrTime)
	require.NotContains(t, err.Error(), "UTC)")

	// CheckTime checks what can be checked before the zone is known.
	require.NoError(t, slot.CheckTime("2026-03-01"))
	require.NoError(t, slot.CheckTime("9999-12-31T10:00"), "fits in a zone east of UTC")
	require.NoError(t, slot.CheckTime("2026-03-01T00:00:00+01:00"))
	for _, bad := range []string{"20260301", "2026-02-29", "2026-03-01T25:00", "10000-01-01", "0001-01-01T00:00:00Z", "yesterday", ""} {
		err := slot.CheckTime(bad)
		require.ErrorIs(t, err, slot.ErrTime, bad)
		require.NotContains(t, err.Error(), "read in", bad)
	}
}
