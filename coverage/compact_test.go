package coverage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCompact compacts finished slots across a DST change, keeps open ones
// and gaps, merges ranges compacted in several calls, and brings slots
// back on a re-open as the next generation.
func TestCompact(t *testing.T) {
	f := newFixture(t, series(t, "compact", "PT1H", "Europe/Berlin", time.Time{}), Options{ChunkSize: 5})
	ctx := context.Background()
	from := utc("2026-03-28T12:00:00Z")
	to := from.Add(24 * time.Hour)
	at := func(i int) time.Time { return from.Add(time.Duration(i) * time.Hour) }
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = clock_timestamp(), generation = 3`)
	f.exec(`UPDATE {{schema}}.slot SET status = 'SKIP', completed_at = NULL WHERE slot_start >= $1 AND slot_start < $2`, at(4), at(6))
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late' WHERE slot_start = $1`, at(8))
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start = $1`, at(10))
	before, err := f.c.Status(ctx, from, to)
	require.NoError(t, err)

	dry, err := f.c.Compact(ctx, at(12), WriteOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, WriteResult{Changed: 10}, dry)
	require.Len(t, f.rows(from, to), 23, "a dry run changes nothing")

	res, err := f.c.Compact(ctx, at(12).Add(-time.Minute), WriteOptions{})
	require.NoError(t, err)
	// [0,4) COMPLETE, [4,6) SKIP, [6,8) COMPLETE, 9 COMPLETE; 11 ends after
	// the boundary.
	require.Equal(t, WriteResult{Changed: 9, Ranges: 4}, res)
	require.Len(t, f.rows(from, to), 14)
	after, err := f.c.Status(ctx, from, to)
	require.NoError(t, err)
	require.Equal(t, before.Counts.Complete, after.Counts.Complete)
	require.Equal(t, before.Counts.Skip, after.Counts.Skip)
	require.Equal(t, before.Missing, after.Missing)
	requireSameGaps(t, []Gap{{Start: at(10), End: at(11), Slots: 1}}, f.gaps(from, to))

	// Compacting the rest merges with the ranges before.
	res, err = f.c.Compact(ctx, to, WriteOptions{})
	require.NoError(t, err)
	require.Equal(t, WriteResult{Changed: 13, Ranges: 5}, res) // 8 (open) and 10 (missing) break runs
	require.Len(t, f.rows(from, to), 1)
	lo, hi, ok, err := f.c.Extent(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []time.Time{from, to}, []time.Time{lo.UTC(), hi.UTC()}, "the extent includes compacted slots")

	// A re-open across compacted and stored slots.
	ro, err := f.c.Reopen(ctx, at(3), at(9), WriteOptions{Reason: "late data", DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 3+2, ro.Changed, "COMPLETE and SKIP by default, not the open one")
	ro, err = f.c.Reopen(ctx, at(3), at(9), WriteOptions{Reason: "late data", States: []string{statusComplete}})
	require.NoError(t, err)
	require.EqualValues(t, 3, ro.Changed)
	rows := f.rows(at(3), at(9))
	require.Len(t, rows, 4)
	for _, r := range rows {
		require.Equal(t, statusAvailable, r.Status)
	}
	var gen int64
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT min(generation) FROM `+f.db.Schema+`.slot WHERE message = 'late data'`).Scan(&gen))
	require.EqualValues(t, 4, gen, "the generation after the highest compacted")
	st, err := f.c.Status(ctx, from, to)
	require.NoError(t, err)
	require.Equal(t, before.Counts.Complete-3, st.Counts.Complete)
	require.Equal(t, before.Counts.Available+3, st.Counts.Available)
	require.Equal(t, before.Counts.Skip, st.Counts.Skip)
}

// TestMaterializeNeverRecreatesCompactedSlots: a materializer whose gap
// search ran before the slots it found missing were inserted, completed
// and compacted (by others, meanwhile) must not insert them again: they
// would be claimed and run a second time.
func TestMaterializeNeverRecreatesCompactedSlots(t *testing.T) {
	f := newFixture(t, series(t, "race", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(10 * time.Minute)
	// The stale gap search: the whole range is missing.
	stale := f.c.newBatch()
	for _, g := range f.gaps(from, to) {
		for sl := range f.grid.Slots(g.Start, g.End) {
			stale.add(sl)
		}
	}
	require.EqualValues(t, 10, stale.len())
	// Meanwhile: materialized, done, compacted.
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = clock_timestamp()`)
	res, err := f.c.Compact(ctx, to, WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Changed)

	n, err := f.c.insertBatch(ctx, &stale, statusAvailable, nil, true, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, f.rows(from, to), "no compacted slot is work again")
	m, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	require.Zero(t, m.Inserted)
	sk, err := f.c.Skip(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	require.Zero(t, sk.Inserted)
	require.Empty(t, f.rows(from, to))
}

// TestStoredRangesFollowDeletes: a range materialized is recorded as
// stored, and a delete by plain SQL, however done, cuts it, so the gap
// search finds the hole; a materializer that raced with the delete does
// not record the range.
func TestStoredRangesFollowDeletes(t *testing.T) {
	f := newFixture(t, series(t, "stored", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(100 * time.Minute)
	at := func(i int) time.Time { return from.Add(time.Duration(i) * time.Minute) }
	stored := func() []span {
		cov, err := f.c.covered(ctx, f.db.Pool, from, to)
		require.NoError(t, err)
		return cov
	}
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	require.Equal(t, []span{{from, to}}, utcSpans(stored()))

	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start IN ($1, $2, $3)`, at(10), at(11), at(50))
	require.Equal(t, []span{{from, at(10)}, {at(12), at(50)}, {at(51), to}}, utcSpans(stored()))
	requireSameGaps(t, f.bruteGaps(from, to), f.gaps(from, to))

	// A materializer that read the deletion counter before a delete
	// records nothing.
	mark, err := f.c.deletions(ctx, f.db.Pool)
	require.NoError(t, err)
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start = $1`, at(70))
	require.NoError(t, f.c.recordStored(ctx, from, to, mark))
	require.Equal(t, []span{{from, at(10)}, {at(12), at(50)}, {at(51), at(70)}, {at(71), to}}, utcSpans(stored()))
	requireSameGaps(t, f.bruteGaps(from, to), f.gaps(from, to))

	// Filling the holes records the whole range again; a TRUNCATE
	// forgets it.
	_, err = f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	require.Equal(t, []span{{from, to}}, utcSpans(stored()))
	f.exec(`TRUNCATE {{schema}}.slot`)
	require.Empty(t, stored())
	requireSameGaps(t, []Gap{{Start: from, End: to, Slots: 100}}, f.gaps(from, to))
}

func utcSpans(in []span) []span {
	for i := range in {
		in[i].lo, in[i].hi = in[i].lo.UTC(), in[i].hi.UTC()
	}
	return in
}

// TestConcurrentMaterializersRecordStoredOnce: materializers of the same
// range at once each record it as stored (queued on the series' row),
// without a duplicate key, leaving one stored range.
func TestConcurrentMaterializersRecordStoredOnce(t *testing.T) {
	f := newFixture(t, series(t, "concurrent", "PT1M", "UTC", time.Time{}), Options{ChunkSize: 10})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(60 * time.Minute)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			// Ranges overlapping in several ways, all within [from, to).
			lo := from.Add(time.Duration(i%3) * 10 * time.Minute)
			_, err := f.c.Materialize(ctx, lo, to.Add(-time.Duration(i%2)*5*time.Minute), WriteOptions{})
			errs <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	cov, err := f.c.covered(ctx, f.db.Pool, from, to)
	require.NoError(t, err)
	require.Equal(t, []span{{from, to}}, utcSpans(cov))
	var rows int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+f.db.Schema+`.slot_stored`).Scan(&rows))
	require.Equal(t, 1, rows, "merged into one range")
	f.requireGrid(from, to)
}
