package coverage

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/slot"
)

// TestMaterializeWritesTheGrid materializes ranges of clock and calendar
// series, across DST changes and month ends, and checks the rows are exactly
// the grid; then punches holes and checks Gaps finds exactly them and a
// second Materialize fills exactly them.
func TestMaterializeWritesTheGrid(t *testing.T) {
	berlin := "Europe/Berlin"
	tests := []struct {
		name     string
		grid     func(t *testing.T) slot.Series
		from, to time.Time
		check    func(t *testing.T, rows []row)
	}{
		{
			name: "PT5M",
			grid: func(t *testing.T) slot.Series { return series(t, "pt5m", "PT5M", "UTC", time.Time{}) },
			from: utc("2026-03-01T00:00:00Z"), to: utc("2026-03-03T00:00:00Z"),
			check: func(t *testing.T, rows []row) { require.Len(t, rows, 576) },
		},
		{
			// Too long a clock interval for the database to compute a
			// chunk's offsets exactly: the client sends every bound.
			name: "PT8760H",
			grid: func(t *testing.T) slot.Series { return series(t, "pt8760h", "PT8760H", "UTC", time.Time{}) },
			from: utc("2000-01-01T00:00:00Z"), to: utc("2030-01-01T00:00:00Z"),
			check: func(t *testing.T, rows []row) { require.Len(t, rows, 31) },
		},
		{
			name: "PT1H Berlin across both DST changes",
			grid: func(t *testing.T) slot.Series { return series(t, "pt1h", "PT1H", berlin, time.Time{}) },
			from: utc("2026-03-28T00:00:00Z"), to: utc("2026-10-27T00:00:00Z"),
			check: func(t *testing.T, rows []row) {
				for _, r := range rows {
					require.Equal(t, time.Hour, r.End.Sub(r.Start))
				}
			},
		},
		{
			name: "P1D Berlin across both DST days",
			grid: func(t *testing.T) slot.Series { return series(t, "p1d", "P1D", berlin, time.Time{}) },
			from: utc("2026-03-01T00:00:00Z"), to: utc("2026-11-30T00:00:00Z"),
			check: func(t *testing.T, rows []row) {
				lengths := map[string]time.Duration{}
				for _, r := range rows {
					lengths[r.Start.In(r.Start.Location()).Format("2006-01-02")] = r.End.Sub(r.Start)
				}
				loc, _ := time.LoadLocation(berlin)
				day := func(s string) time.Duration {
					d, _ := time.ParseInLocation("2006-01-02", s, loc)
					for _, r := range rows {
						if r.Start.Equal(d) {
							return r.End.Sub(r.Start)
						}
					}
					t.Fatalf("no row starts at %s", d)
					return 0
				}
				require.Equal(t, 23*time.Hour, day("2026-03-29"))
				require.Equal(t, 25*time.Hour, day("2026-10-25"))
				require.Equal(t, 24*time.Hour, day("2026-10-26"))
			},
		},
		{
			name: "P1M from January 31",
			grid: func(t *testing.T) slot.Series {
				return series(t, "p1m", "P1M", "America/New_York", time.Date(2026, 1, 31, 0, 0, 0, 0, mustZone(t, "America/New_York")))
			},
			from: utc("2026-01-01T00:00:00Z"), to: utc("2028-06-01T00:00:00Z"),
			check: func(t *testing.T, rows []row) {
				require.Len(t, rows, 29)
				var days []int
				for _, r := range rows[:5] {
					days = append(days, r.Start.In(mustZone(t, "America/New_York")).Day())
				}
				require.Equal(t, []int{31, 28, 31, 30, 31}, days, "origin + n·P1M, no drift")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.grid(t), Options{ChunkSize: 37})
			ctx := context.Background()
			want := int64(len(f.gridOf(tt.from, tt.to)))

			requireSameGaps(t, []Gap{{Start: f.gridOf(tt.from, tt.to)[0].Start, End: f.gridOf(tt.from, tt.to)[want-1].End, Slots: want}}, f.gaps(tt.from, tt.to))
			dry, err := f.c.Materialize(ctx, tt.from, tt.to, WriteOptions{DryRun: true})
			require.NoError(t, err)
			require.Equal(t, WriteResult{Slots: want, Changed: want, Inserted: want}, dry)
			require.Empty(t, f.rows(tt.from, tt.to), "a dry run writes nothing")

			res, err := f.c.Materialize(ctx, tt.from, tt.to, WriteOptions{})
			require.NoError(t, err)
			require.Equal(t, WriteResult{Slots: want, Changed: want, Inserted: want}, res)
			f.requireGrid(tt.from, tt.to)
			tt.check(t, f.rows(tt.from, tt.to))
			require.Empty(t, f.gaps(tt.from, tt.to))

			res, err = f.c.Materialize(ctx, tt.from, tt.to, WriteOptions{})
			require.NoError(t, err)
			require.Equal(t, WriteResult{Slots: want}, res, "idempotent")

			// Holes: the first slot, a run, a single slot, the last two.
			slots := f.gridOf(tt.from, tt.to)
			holes := []int{0, 3, 4, 5, 9, len(slots) - 2, len(slots) - 1}
			var starts []time.Time
			for _, i := range holes {
				starts = append(starts, slots[i].Start)
			}
			require.EqualValues(t, len(holes), f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start = ANY($1)`, starts))
			wantGaps := []Gap{
				{slots[0].Start, slots[0].End, 1},
				{slots[3].Start, slots[5].End, 3},
				{slots[9].Start, slots[9].End, 1},
				{slots[len(slots)-2].Start, slots[len(slots)-1].End, 2},
			}
			requireSameGaps(t, wantGaps, f.gaps(tt.from, tt.to))
			requireSameGaps(t, f.bruteGaps(tt.from, tt.to), f.gaps(tt.from, tt.to))

			res, err = f.c.Materialize(ctx, tt.from, tt.to, WriteOptions{})
			require.NoError(t, err)
			require.Equal(t, WriteResult{Slots: want, Changed: int64(len(holes)), Inserted: int64(len(holes))}, res)
			f.requireGrid(tt.from, tt.to)
		})
	}
}

func mustZone(t testing.TB, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestGapsSearchesLevels checks Gaps against a slot-by-slot computation on a
// range large enough to be split twice, with holes of every size, rows off
// the grid, and range bounds in the middle of slots.
func TestGapsSearchesLevels(t *testing.T) {
	f := newFixture(t, series(t, "levels", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(200_000 * time.Minute)
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	// Runs of 1, 2, 63, 64, 65, 1000 and 5000 slots, one every 20,000.
	for i, n := range []int{1, 2, 63, 64, 65, 1000, 5000, 1, 1} {
		lo := from.Add(time.Duration(i*20_000+i*7) * time.Minute)
		f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start >= $1 AND slot_start < $2`, lo, lo.Add(time.Duration(n)*time.Minute))
	}
	// Everything in one part of the first split.
	f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start >= $1 AND slot_start < $2`, from.Add(190_000*time.Minute), from.Add(190_300*time.Minute))
	// A row off the grid inside a hole is not a slot.
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end) VALUES ($1, $2, $3, $4)`,
		f.grid.Name(), "PT1M", from.Add(20_007*time.Minute+30*time.Second), from.Add(20_008*time.Minute+30*time.Second))

	want := f.bruteGaps(from, to)
	require.Len(t, want, 10)
	requireSameGaps(t, want, f.gaps(from, to))

	// Bounds inside slots: a slot belongs to the range its start is in.
	mid := func(t time.Time) time.Time { return t.Add(30 * time.Second) }
	requireSameGaps(t, f.bruteGaps(mid(from), mid(to)), f.gaps(mid(from), mid(to)))
	// The second hole, alone.
	g := f.gaps(from.Add(20_000*time.Minute), from.Add(40_000*time.Minute))
	requireSameGaps(t, []Gap{{from.Add(20_007 * time.Minute), from.Add(20_009 * time.Minute), 2}}, g)

	// An empty range has no gaps; a reversed one is bad input.
	require.Empty(t, f.gaps(from, from))
	for _, err := range f.c.Gaps(ctx, to, from) {
		require.ErrorIs(t, err, slot.ErrInvalid)
	}
}

// TestMaterializeConcurrently runs eight materializers over overlapping
// ranges at once: each slot is inserted exactly once and none fails.
func TestMaterializeConcurrently(t *testing.T) {
	f := newFixture(t, series(t, "concurrent", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	base := utc("2026-01-01T00:00:00Z")
	const workers = 8
	var wg sync.WaitGroup
	inserted := make([]int64, workers)
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(ctx, f.db.Pool, f.grid, Options{Schema: f.db.Schema, ChunkSize: 700})
			if err != nil {
				errs[i] = err
				return
			}
			// Ranges of 6,000 slots starting 1,000 apart: up to six overlap.
			from := base.Add(time.Duration(i*1000) * time.Minute)
			res, err := c.Materialize(ctx, from, from.Add(6000*time.Minute), WriteOptions{})
			inserted[i], errs[i] = res.Inserted, err
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	end := base.Add(13_000 * time.Minute)
	var total int64
	for _, n := range inserted {
		total += n
	}
	require.EqualValues(t, 13_000, total, "every slot inserted by exactly one materializer")
	f.requireGrid(base, end)
}

// TestMaterializeDoesNotTouchRows checks stored rows of any state survive a
// materialization unchanged, held ones included, and that materializing
// wakes workers once per call.
func TestMaterializeDoesNotTouchRows(t *testing.T) {
	f := newFixture(t, series(t, "keep", "PT1H", "UTC", time.Time{}), Options{ChunkSize: 3})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(24 * time.Hour)
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, message)
		VALUES ($1, 'PT1H', $2, $3, 'COMPLETE', 'done')`, f.grid.Name(), from.Add(5*time.Hour), from.Add(6*time.Hour))
	release := f.holdLocked(from.Add(5 * time.Hour))
	defer release()
	events := f.listen()

	var progress []int64
	res, err := f.c.Materialize(ctx, from, to, WriteOptions{Progress: func(done, total int64) {
		require.EqualValues(t, 24, total)
		progress = append(progress, done)
	}})
	require.NoError(t, err)
	require.Equal(t, WriteResult{Slots: 24, Changed: 23, Inserted: 23}, res)
	require.Equal(t, []int64{3, 7, 10, 13, 16, 19, 22, 24}, progress, "the stored slot counts as done")
	rows := f.rows(from, to)
	require.Equal(t, "COMPLETE", rows[5].Status)
	require.Equal(t, "done", *rows[5].Message)

	select {
	case ev := <-events:
		require.Equal(t, "materialize", ev.Reason)
		require.Equal(t, f.grid.Name(), ev.Name)
		require.Equal(t, "PT1H", ev.Interval)
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	select {
	case ev := <-events:
		t.Fatalf("a second notification for one call: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestMaterializeAsSkipped inserts the missing slots as SKIP, leaves the
// stored ones alone and wakes no one.
func TestMaterializeAsSkipped(t *testing.T) {
	f := newFixture(t, series(t, "catchup", "PT1H", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	to := from.Add(6 * time.Hour)
	_, err := f.c.Materialize(ctx, from.Add(2*time.Hour), from.Add(3*time.Hour), WriteOptions{})
	require.NoError(t, err)
	events := f.listen()
	res, err := f.c.Materialize(ctx, from, to, WriteOptions{Reason: "missed during downtime"})
	require.NoError(t, err)
	require.Equal(t, WriteResult{Slots: 6, Changed: 5, Inserted: 5}, res)
	f.requireGrid(from, to)
	for i, r := range f.rows(from, to) {
		if i == 2 {
			require.Equal(t, "AVAILABLE", r.Status)
			continue
		}
		require.Equal(t, "SKIP", r.Status, "slot %d", i)
		require.Equal(t, "missed during downtime", *r.Message)
	}
	select {
	case ev := <-events:
		t.Fatalf("skipped slots wake no one: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}
