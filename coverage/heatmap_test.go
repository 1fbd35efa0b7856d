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
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	at := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, berlin) }
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = $2 WHERE slot_start < $1`, day(29), at(28, 23))
	f.exec(`UPDATE {{schema}}.slot SET status = 'SKIP' WHERE slot_start IN ($1, $2)`, at(29, 0), at(29, 1))
	f.exec(`UPDATE {{schema}}.slot SET fail_count = 1, not_before = $2, message = 'disk full' WHERE slot_start = $1`, at(29, 4), at(29, 5))
	f.exec(`UPDATE {{schema}}.slot SET fail_count = 3, not_before = 'infinity', message = 'bad input' WHERE slot_start = $1`, at(29, 5))
	f.exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() + interval '1 hour' WHERE slot_start = $1`, at(29, 6))
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start IN ($1, $2, $3)`, at(29, 7), at(29, 8), at(30, 12))

	h := f.heatmap(from, to, 10)
	require.Equal(t, unitDay, h.Unit)
	require.Len(t, h.Buckets, 3)
	require.Equal(t, HeatmapBucket{Start: day(28), End: day(29), Slots: 24, Complete: 24}, h.Buckets[0])
	require.Equal(t, HeatmapBucket{Start: day(29), End: day(30), Slots: 23, Skipped: 2, Failed: 1, Parked: 1, InFlight: 1, Missing: 2, Open: 16}, h.Buckets[1])
	require.Equal(t, HeatmapBucket{Start: day(30), End: day(31), Slots: 24, Open: 23, Missing: 1}, h.Buckets[2])
	require.Equal(t, HeatmapBucket{Start: from, End: to, Slots: 71, Complete: 24, Skipped: 2, Failed: 1, Parked: 1, InFlight: 1, Missing: 3, Open: 39}, h.Total)
	require.True(t, h.OldestOpen.Equal(at(29, 3)), "oldest open %s", h.OldestOpen)
	require.True(t, h.LastCompleted.Equal(at(28, 23)), "last completed %s", h.LastCompleted)

	// Hours of the short day: single slots, 02:00 does not exist.
	h = f.heatmap(day(29), day(30), 100)
	require.Equal(t, unitSlot, h.Unit)
	require.Len(t, h.Buckets, 23)
	require.Equal(t, 3, h.Buckets[2].Start.Hour())
	require.Equal(t, int64(1), h.Buckets[3].Failed, "04:00 failed")
	require.Equal(t, int64(1), h.Buckets[4].Parked, "05:00 parked")
	require.Equal(t, int64(1), h.Buckets[5].InFlight, "06:00 in flight")
	require.Equal(t, int64(1), h.Buckets[6].Missing, "07:00 missing")

	// Months of a long range, cut to the range.
	h = f.heatmap(day(28), time.Date(2027, 1, 1, 0, 0, 0, 0, berlin), 40)
	require.Equal(t, unitMonth, h.Unit)
	require.Len(t, h.Buckets, 10)
	require.Equal(t, day(28), h.Buckets[0].Start)
	require.Equal(t, time.Date(2026, 4, 1, 0, 0, 0, 0, berlin), h.Buckets[0].End)

	_, err = f.c.Heatmap(ctx, from, to, 0)
	require.ErrorIs(t, err, slot.ErrInvalid)
	_, err = f.c.Heatmap(ctx, to, from, 10)
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
		require.Equal(t, unitYear, h.Unit)
		require.LessOrEqual(t, len(h.Buckets), max)
		require.Equal(t, int64(10806), h.Total.Slots)
		require.Equal(t, h.Total.Slots, h.Total.Missing+h.Total.NotDue)
		// The slots after the due boundary are not due, not missing.
		k, err := f.grid.Count(h.Due, to)
		require.NoError(t, err)
		require.Equal(t, k, h.Total.NotDue)
	}
}

// TestHeatmapCompacted: compacted slots count as they were, COMPLETE or
// SKIP, never missing, in the buckets they fall in, cut by the range.
func TestHeatmapCompacted(t *testing.T) {
	f := newFixture(t, series(t, "hmc", "PT1H", "UTC", time.Time{}), Options{ChunkSize: 7})
	ctx := context.Background()
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	at := func(d, h int) time.Time { return time.Date(2026, 1, d, h, 0, 0, 0, time.UTC) }
	_, err := f.c.Materialize(ctx, day(1), day(4), WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = $1 WHERE slot_start < $2`, at(3, 23), day(3))
	f.exec(`UPDATE {{schema}}.slot SET status = 'SKIP', completed_at = NULL WHERE slot_start >= $1 AND slot_start < $2`, at(1, 20), at(2, 2))
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', completed_at = NULL WHERE slot_start = $1`, at(2, 5))
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start = $1`, at(2, 6))
	before := f.heatmap(day(1), day(4), 10)

	// Day 1 and day 2 but its last hours: 20:00 to 02:00 skipped, 05:00
	// open, 06:00 missing.
	res, err := f.c.Compact(ctx, at(2, 20), WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 24+20-2, res.Changed)
	h := f.heatmap(day(1), day(4), 10)
	require.Equal(t, unitDay, h.Unit)
	require.Equal(t, before.Buckets, h.Buckets, "compaction changes no count")
	require.Equal(t, before.Total, h.Total)
	require.Equal(t, HeatmapBucket{Start: day(1), End: day(2), Slots: 24, Complete: 20, Skipped: 4}, h.Buckets[0])
	require.Equal(t, HeatmapBucket{Start: day(2), End: day(3), Slots: 24, Complete: 20, Skipped: 2, Open: 1, Missing: 1}, h.Buckets[1])
	require.Equal(t, HeatmapBucket{Start: day(3), End: day(4), Slots: 24, Open: 24}, h.Buckets[2])
	require.True(t, h.LastCompleted.Equal(at(3, 23)), "last completed %s", h.LastCompleted)
	require.True(t, h.OldestOpen.Equal(at(2, 5)), "oldest open %s", h.OldestOpen)

	// Slots, cut within a compacted SKIP run and a COMPLETE one.
	h = f.heatmap(at(1, 22), at(2, 8), 100)
	require.Equal(t, unitSlot, h.Unit)
	require.Equal(t, HeatmapBucket{Start: at(1, 22), End: at(2, 8), Slots: 10, Complete: 4, Skipped: 4, Open: 1, Missing: 1}, h.Total)
	require.Equal(t, int64(1), h.Buckets[0].Skipped)
	require.Equal(t, int64(1), h.Buckets[4].Complete)
	require.Equal(t, int64(1), h.Buckets[8].Missing)

	// A compacted slot's history says so, rather than "no row".
	hs, err := f.c.History(ctx, at(1, 3))
	require.NoError(t, err)
	require.Nil(t, hs.Current)
	require.NotNil(t, hs.Compacted)
	require.Equal(t, statusComplete, hs.Compacted.Status)
	require.EqualValues(t, 1, hs.Compacted.Generation)
	require.True(t, hs.Compacted.CompletedAt.Equal(at(3, 23)))
	hs, err = f.c.History(ctx, at(2, 6))
	require.NoError(t, err)
	require.Nil(t, hs.Compacted, "a missing slot is not compacted")
}

// heatmap returns the heatmap of [from, to) in at most buckets buckets,
// after checking that reading every row gives the same: the way taken
// when the stored and compacted ranges cover at most half the range,
// forced here by hiding the stored ones.
func (f *fixture) heatmap(from, to time.Time, buckets int) Heatmap {
	f.t.Helper()
	ctx := context.Background()
	h, err := f.c.Heatmap(ctx, from, to, buckets)
	require.NoError(f.t, err)
	f.exec(`CREATE TABLE {{schema}}.stored_aside AS SELECT * FROM {{schema}}.slot_stored`)
	f.exec(`DELETE FROM {{schema}}.slot_stored`)
	all, err := f.c.Heatmap(ctx, from, to, buckets)
	require.NoError(f.t, err)
	f.exec(`INSERT INTO {{schema}}.slot_stored SELECT * FROM {{schema}}.stored_aside`)
	f.exec(`DROP TABLE {{schema}}.stored_aside`)
	require.Equal(f.t, h, all, "gap search and reading every row agree")
	return h
}
