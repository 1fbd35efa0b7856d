package coverage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/slot"
)

// TestHeatmap checks buckets against the rows: every state, gaps, a day
// shortened by daylight saving time, and the units chosen for a range.
func TestHeatmap(t *testing.T) {
	f := newFixture(t, series(t, "hm", "PT1H", "Europe/Berlin", time.Time{}), Options{})
	ctx := context.Background()
	berlin := f.grid.Location()
	day := func(d int) time.Time { return time.Date(2026, 3, d, 0, 0, 0, 0, berlin) }
	from, to := day(28), day(31) // 24 + 23 (clocks go forward on the 29th) + 24 hours
	_, err := f.c.Materialize(ctx, from, to, MaterializeOptions{})
	require.NoError(t, err)
	at := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, berlin) }
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = $2 WHERE slot_start < $1`, day(29), at(28, 23))
	f.exec(`UPDATE {{schema}}.slot SET status = 'SKIP' WHERE slot_start IN ($1, $2)`, at(29, 0), at(29, 1))
	f.exec(`UPDATE {{schema}}.slot SET fail_count = 1, not_before = $2, message = 'disk full' WHERE slot_start = $1`, at(29, 4), at(29, 5))
	f.exec(`UPDATE {{schema}}.slot SET fail_count = 3, not_before = 'infinity', message = 'bad input' WHERE slot_start = $1`, at(29, 5))
	f.exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() + interval '1 hour' WHERE slot_start = $1`, at(29, 6))
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start IN ($1, $2, $3)`, at(29, 7), at(29, 8), at(30, 12))

	h, err := f.c.Heatmap(ctx, from, to, 10)
	require.NoError(t, err)
	require.Equal(t, UnitDay, h.Unit)
	require.Len(t, h.Buckets, 3)
	require.Equal(t, Bucket{Start: day(28), End: day(29), Slots: 24, Complete: 24}, h.Buckets[0])
	require.Equal(t, Bucket{Start: day(29), End: day(30), Slots: 23, Skipped: 2, Failed: 1, Parked: 1, InFlight: 1, Missing: 2, Open: 16}, h.Buckets[1])
	require.Equal(t, Bucket{Start: day(30), End: day(31), Slots: 24, Open: 23, Missing: 1}, h.Buckets[2])
	require.Equal(t, Bucket{Start: from, End: to, Slots: 71, Complete: 24, Skipped: 2, Failed: 1, Parked: 1, InFlight: 1, Missing: 3, Open: 39}, h.Total)
	require.True(t, h.OldestOpen.Equal(at(29, 3)), "oldest open %s", h.OldestOpen)
	require.True(t, h.LastCompleted.Equal(at(28, 23)), "last completed %s", h.LastCompleted)

	// Hours of the short day: single slots, 02:00 does not exist.
	h, err = f.c.Heatmap(ctx, day(29), day(30), 100)
	require.NoError(t, err)
	require.Equal(t, UnitSlot, h.Unit)
	require.Len(t, h.Buckets, 23)
	require.Equal(t, 3, h.Buckets[2].Start.Hour())
	require.Equal(t, int64(1), h.Buckets[3].Failed, "04:00 failed")
	require.Equal(t, int64(1), h.Buckets[4].Parked, "05:00 parked")
	require.Equal(t, int64(1), h.Buckets[5].InFlight, "06:00 in flight")
	require.Equal(t, int64(1), h.Buckets[6].Missing, "07:00 missing")

	// Months of a long range, cut to the range.
	h, err = f.c.Heatmap(ctx, day(28), time.Date(2027, 1, 1, 0, 0, 0, 0, berlin), 40)
	require.NoError(t, err)
	require.Equal(t, UnitMonth, h.Unit)
	require.Len(t, h.Buckets, 10)
	require.Equal(t, day(28), h.Buckets[0].Start)
	require.Equal(t, time.Date(2026, 4, 1, 0, 0, 0, 0, berlin), h.Buckets[0].End)

	// A failed slot due for its retry now has no not_before.
	f.exec(`UPDATE {{schema}}.slot SET fail_count = 2, not_before = NULL, message = 'timeout', updated_at = now() - interval '1 day' WHERE slot_start = $1`, at(30, 1))
	fs, err := f.c.FailedSlots(ctx, from, to, 10)
	require.NoError(t, err)
	require.Len(t, fs, 3)
	require.Equal(t, "timeout", fs[2].Message)
	require.False(t, fs[2].Parked)
	require.True(t, fs[2].NotBefore.IsZero())
	require.True(t, fs[0].Parked)
	require.Equal(t, "bad input", fs[0].Message)
	require.Equal(t, at(29, 5), fs[0].Start)
	require.Equal(t, "disk full", fs[1].Message)

	_, err = f.c.Heatmap(ctx, from, to, 0)
	require.ErrorIs(t, err, slot.ErrInvalid)
	_, err = f.c.Heatmap(ctx, to, from, 10)
	require.ErrorIs(t, err, slot.ErrInvalid)
	_, err = f.c.FailedSlots(ctx, from, to, 0)
	require.ErrorIs(t, err, slot.ErrInvalid)
}

// TestHeatmapYears checks that a range too long for years in max buckets
// gets buckets of several years.
func TestHeatmapYears(t *testing.T) {
	f := newFixture(t, series(t, "hm", "P1D", "UTC", time.Time{}), Options{})
	from, to := utc("2001-06-01T00:00:00Z"), utc("2031-01-01T00:00:00Z")
	for _, max := range []int{1, 2, 3, 7, 40} {
		h, err := f.c.Heatmap(context.Background(), from, to, max)
		require.NoError(t, err)
		require.Equal(t, UnitYear, h.Unit)
		require.LessOrEqual(t, len(h.Buckets), max)
		require.Equal(t, int64(10806), h.Total.Slots)
		require.Equal(t, h.Total.Slots, h.Total.Missing)
	}
}
