package almanac

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/slot"
)

func grid(t *testing.T, interval, zone string) slot.Series {
	t.Helper()
	loc, err := slot.LoadZone(zone)
	require.NoError(t, err)
	s, err := slot.NewSeries("job", mustInterval(interval), loc, time.Time{})
	require.NoError(t, err)
	return s
}

func at(t *testing.T, text string, loc *time.Location) time.Time {
	t.Helper()
	tm, err := slot.ParseTime(text, loc)
	require.NoError(t, err)
	return tm
}

func TestDueWithLag(t *testing.T) {
	g := grid(t, "PT5M", "UTC")
	for _, tt := range []struct {
		now, lag, want string
	}{
		// "The five-minute window that began six minutes ago": at 10:06 with
		// a one-minute lag, [10:00, 10:05) is due and [10:05, 10:10) is not.
		{"2026-03-01T10:06:00Z", "1m", "2026-03-01T10:05:00Z"},
		{"2026-03-01T10:05:59Z", "1m", "2026-03-01T10:00:00Z"},
		{"2026-03-01T10:05:00Z", "0s", "2026-03-01T10:05:00Z"},
		{"2026-03-01T10:04:59Z", "0s", "2026-03-01T10:00:00Z"},
		{"2026-03-01T10:06:00Z", "1h", "2026-03-01T09:05:00Z"},
	} {
		lag, err := time.ParseDuration(tt.lag)
		require.NoError(t, err)
		due, err := dueTo(g, lag, at(t, tt.now, nil))
		require.NoError(t, err)
		require.Equal(t, tt.want, slot.FormatTime(due.UTC()), "now %s lag %s", tt.now, tt.lag)
	}
}

func TestTriggerNextSlotDue(t *testing.T) {
	g := grid(t, "PT5M", "UTC")
	tr := trigger{grid: g, lag: time.Minute}
	next, err := tr.next(at(t, "2026-03-01T10:06:00Z", nil))
	require.NoError(t, err)
	require.Equal(t, "2026-03-01T10:11:00Z", slot.FormatTime(next), "[10:05, 10:10) is due at 10:11")
	next, err = tr.next(at(t, "2026-03-01T10:05:59Z", nil))
	require.NoError(t, err)
	require.Equal(t, "2026-03-01T10:06:00Z", slot.FormatTime(next))
}

// TestTriggerAcrossDST: daily and hourly series in Europe/Berlin fire at
// local midnight and on every absolute hour across both DST days.
func TestTriggerAcrossDST(t *testing.T) {
	berlin := grid(t, "P1D", "Europe/Berlin").Location()
	daily := trigger{grid: grid(t, "P1D", "Europe/Berlin")}
	var fires []string
	now := at(t, "2026-03-28T12:00", berlin)
	for range 3 {
		next, err := daily.next(now)
		require.NoError(t, err)
		fires = append(fires, slot.FormatTime(next.In(berlin)))
		now = next
	}
	require.Equal(t, []string{"2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00"}, fires)

	hourly := trigger{grid: grid(t, "PT1H", "Europe/Berlin")}
	now = at(t, "2026-10-25T00:30", berlin)
	var gaps []time.Duration
	for range 5 {
		next, err := hourly.next(now)
		require.NoError(t, err)
		gaps = append(gaps, next.Sub(now))
		now = next
	}
	require.Equal(t, []time.Duration{30 * time.Minute, time.Hour, time.Hour, time.Hour, time.Hour}, gaps,
		"hourly slots stay an hour apart through the repeated hour")
	require.Equal(t, "2026-10-25T04:00:00+01:00", slot.FormatTime(now.In(berlin)),
		"01:00+02, 02:00+02, 02:00+01, 03:00+01, 04:00+01")
}

func TestCatchUpPlan(t *testing.T) {
	g := grid(t, "PT5M", "UTC")
	from := at(t, "2026-03-01T00:00:00Z", nil)
	due := at(t, "2026-03-01T10:00:00Z", nil)
	for _, tt := range []struct {
		policy CatchUp
		want   string
	}{
		{CatchUpAll, "2026-03-01T00:00:00Z"},
		{CatchUpLatest(1), "2026-03-01T09:55:00Z"},
		{CatchUpLatest(3), "2026-03-01T09:45:00Z"},
		{CatchUpLatest(1000), "2026-03-01T00:00:00Z"}, // more than the range holds
		// none: slots due within the grace (a minute, or an interval) still run.
		{CatchUpNone, "2026-03-01T09:55:00Z"},
	} {
		skipBefore, err := catchUpPlan(tt.policy, g, from, due)
		require.NoError(t, err)
		require.Equal(t, tt.want, slot.FormatTime(skipBefore), tt.policy.String())
	}

	// Monthly series: latest:2 keeps the last two months, in the zone.
	m := grid(t, "P1M", "Europe/Berlin")
	skipBefore, err := catchUpPlan(CatchUpLatest(2), m, at(t, "2026-01-01", m.Location()), at(t, "2026-06-01", m.Location()))
	require.NoError(t, err)
	require.Equal(t, "2026-04-01T00:00:00+02:00", slot.FormatTime(skipBefore))

	// An empty range plans nothing.
	skipBefore, err = catchUpPlan(CatchUpNone, g, due, due)
	require.NoError(t, err)
	require.Equal(t, due, skipBefore)
}
