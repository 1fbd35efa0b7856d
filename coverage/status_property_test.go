package coverage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// TestStatusMatchesNaiveCounts puts random fixtures through the ways slots
// come and go — materializing parts of a range, plain SQL deletes and
// inserts, every state, compaction, re-opens of compacted slots — and
// checks after each step that Status and Gaps, which skip stored and
// compacted ranges and derive COMPLETE from the others, equal what a naive
// reading of every row and every grid slot finds. Grids with DST days and
// calendar months included.
func TestStatusMatchesNaiveCounts(t *testing.T) {
	grids := []struct{ name, interval, zone string }{
		{"hourly_berlin", "PT1H", "Europe/Berlin"},
		{"half_hour_ny", "PT30M", "America/New_York"},
		{"daily_berlin", "P1D", "Europe/Berlin"},
		{"monthly", "P1M", "UTC"},
	}
	for i, g := range grids {
		t.Run(g.name, func(t *testing.T) {
			f := newFixture(t, series(t, g.name, g.interval, g.zone, time.Time{}), Options{ChunkSize: 7})
			rng := rand.New(rand.NewPCG(uint64(i), 18))
			// A range across both DST changes of 2026 for the short grids.
			from := f.nth(utc("2026-03-07T00:00:00Z"), 0)
			to := f.nth(from, 120)
			if g.interval == "PT1H" || g.interval == "PT30M" {
				from = f.nth(utc("2026-03-28T12:00:00Z"), 0)
				to = f.nth(from, 100)
			}
			for step := range 12 {
				f.randomStep(rng, from, to)
				f.requireNaiveStatus(from, to, fmt.Sprintf("step %d", step))
				// A sub-range too, whose bounds cut ranges.
				lo, hi := f.randomRange(rng, from, to)
				f.requireNaiveStatus(lo, hi, fmt.Sprintf("step %d, [%s, %s)", step, lo, hi))
			}
		})
	}
}

// randomRange returns a random sub-range of [from, to), bounds not
// necessarily on the grid.
func (f *fixture) randomRange(rng *rand.Rand, from, to time.Time) (time.Time, time.Time) {
	span := to.Sub(from)
	a := from.Add(time.Duration(rng.Int64N(int64(span))))
	b := from.Add(time.Duration(rng.Int64N(int64(span))))
	if b.Before(a) {
		a, b = b, a
	}
	return a.Truncate(time.Second), b.Truncate(time.Second)
}

// randomStep changes the fixture in one of the ways slots come and go.
func (f *fixture) randomStep(rng *rand.Rand, from, to time.Time) {
	f.t.Helper()
	ctx := context.Background()
	lo, hi := f.randomRange(rng, from, to)
	switch rng.IntN(8) {
	case 0, 1:
		_, err := f.c.Materialize(ctx, lo, hi, WriteOptions{})
		require.NoError(f.t, err)
	case 2: // holes, by plain SQL
		f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start >= $1 AND slot_start < $2 AND random() < 0.3`, lo, hi)
	case 3: // slots inserted by another tool, never recorded as stored (a
		// compacted slot is finished: no tool inserts it again)
		for sl := range f.grid.Slots(lo, hi) {
			if rng.IntN(3) == 0 {
				f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
					SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.slot_compacted
						WHERE name = $1 AND "interval" = $2 AND range_start <= $3 AND range_end > $3)
					ON CONFLICT DO NOTHING`, f.grid.Name(), f.grid.Interval().String(), sl.Start, sl.End)
			}
		}
	case 4: // every state, at random
		f.exec(`UPDATE {{schema}}.slot SET
			status = (ARRAY['COMPLETE', 'COMPLETE', 'SKIP', 'AVAILABLE', 'ACQUIRED'])[1 + floor(random() * 5)::int],
			completed_at = clock_timestamp()
			WHERE slot_start >= $1 AND slot_start < $2 AND status <> 'ACQUIRED'`, lo, hi)
		f.exec(`UPDATE {{schema}}.slot SET owner = gen_random_uuid(),
			lease_until = clock_timestamp() + (CASE WHEN random() < 0.5 THEN -1 ELSE 1 END) * interval '1 hour'
			WHERE status = 'ACQUIRED' AND owner IS NULL`)
		f.exec(`UPDATE {{schema}}.slot SET not_before = (ARRAY[NULL, clock_timestamp() + interval '1 hour', 'infinity'])[1 + floor(random() * 3)::int],
			message = CASE WHEN random() < 0.5 THEN 'note' END
			WHERE slot_start >= $1 AND slot_start < $2 AND status = 'AVAILABLE'`, lo, hi)
	case 5, 6:
		_, err := f.c.Compact(ctx, hi, WriteOptions{})
		require.NoError(f.t, err)
	case 7:
		_, err := f.c.Reopen(ctx, lo, hi, WriteOptions{Reason: "late"})
		require.NoError(f.t, err)
	}
}

// requireNaiveStatus checks Status, Gaps and Heatmap (both of its ways,
// see fixture.heatmap) of [from, to) against every row and every grid
// slot, read one by one.
func (f *fixture) requireNaiveStatus(from, to time.Time, what string) {
	f.t.Helper()
	ctx := context.Background()
	from, to = ceilMicro(from), ceilMicro(to)
	got, err := f.c.Status(ctx, from, to)
	require.NoError(f.t, err)
	gaps := f.gaps(from, to)
	h := f.heatmap(from, to, 8)
	var wantBuckets []HeatmapBucket
	for _, b := range h.Buckets {
		wantBuckets = append(wantBuckets, HeatmapBucket{Start: b.Start, End: b.End, Slots: b.Slots})
	}

	// Each row's state, classified by the database clock as the report does.
	type stored struct {
		status, kind string
		failed       bool
	}
	rows := map[int64]stored{}
	rs, err := f.db.Pool.Query(ctx, sqlschema.Render(`SELECT slot_start, status,
		CASE WHEN status = 'ACQUIRED' AND lease_until < clock_timestamp() THEN 'expired'
			WHEN status = 'ACQUIRED' THEN 'acquired'
			WHEN not_before IS NULL OR not_before <= clock_timestamp() THEN 'available'
			WHEN not_before = 'infinity' THEN 'parked'
			ELSE 'backoff' END,
		fail_count > 0
		FROM {{schema}}.slot WHERE name = $1 AND "interval" = $2`, f.db.Schema), f.grid.Name(), f.grid.Interval().String())
	require.NoError(f.t, err)
	var start time.Time
	var r stored
	_, err = pgx.ForEachRow(rs, []any{&start, &r.status, &r.kind, &r.failed}, func() error {
		rows[start.UnixMicro()] = r
		return nil
	})
	require.NoError(f.t, err)
	type compacted struct {
		lo, hi time.Time
		status string
	}
	rs, err = f.db.Pool.Query(ctx, sqlschema.Render(`SELECT range_start, range_end, status FROM {{schema}}.slot_compacted
		WHERE name = $1 AND "interval" = $2`, f.db.Schema), f.grid.Name(), f.grid.Interval().String())
	require.NoError(f.t, err)
	cs, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) (compacted, error) {
		var c compacted
		return c, row.Scan(&c.lo, &c.hi, &c.status)
	})
	require.NoError(f.t, err)

	want := Status{Slots: got.Slots}
	due := got.Due
	var wantGaps []Gap
	for sl := range f.grid.Slots(from, to) {
		want.Slots-- // counted down to zero below
		r, ok := rows[sl.Start.UnixMicro()]
		var in *compacted
		for i := range cs {
			if !sl.Start.Before(cs[i].lo) && sl.Start.Before(cs[i].hi) {
				require.False(f.t, ok, "%s: slot %s has a row and is compacted", what, sl)
				in = &cs[i]
			}
		}
		b := &wantBuckets[slices.IndexFunc(wantBuckets, func(b HeatmapBucket) bool { return !sl.Start.Before(b.Start) && sl.Start.Before(b.End) })]
		switch {
		case in != nil && in.status == statusComplete, in == nil && ok && r.status == statusComplete:
			b.Complete++
		case in != nil || r.status == statusSkip:
			b.Skipped++
		case !ok && !sl.Start.Before(due):
			b.NotDue++
		case !ok:
			b.Missing++
		case r.status == statusAcquired:
			b.InFlight++
		case r.kind == "parked":
			b.Parked++
		case r.failed:
			b.Failed++
		default:
			b.Open++
		}
		switch {
		case in != nil && in.status == statusComplete:
			want.Complete++
		case in != nil:
			want.Skip++
		case !ok:
			if sl.Start.Before(due) {
				want.Missing++
			} else {
				want.NotDue++
			}
			if n := len(wantGaps); n > 0 && wantGaps[n-1].End.Equal(sl.Start) {
				wantGaps[n-1].End, wantGaps[n-1].Slots = sl.End, wantGaps[n-1].Slots+1
			} else {
				wantGaps = append(wantGaps, Gap{Start: sl.Start, End: sl.End, Slots: 1})
			}
		case r.status == statusComplete:
			want.Complete++
		case r.status == statusSkip:
			want.Skip++
		case r.status == statusAcquired:
			want.Acquired++
			if r.kind == "expired" {
				want.LeaseExpired++
			}
		case r.kind == "available":
			want.Available++
		case r.kind == "parked":
			want.Parked++
		default:
			want.Backoff++
		}
		if ok && (r.status == statusAvailable || r.status == statusAcquired) && want.OldestOpen.IsZero() {
			want.OldestOpen = sl.Start
		}
	}
	require.Zero(f.t, want.Slots, "%s: the grid's count", what)
	requireSameGaps(f.t, wantGaps, gaps)
	dueGaps := slices.DeleteFunc(slices.Clone(wantGaps), func(g Gap) bool { return !g.Start.Before(due) })
	require.Equal(f.t, int64(len(dueGaps)), got.Gaps, what)
	if len(dueGaps) > 0 {
		require.True(f.t, dueGaps[0].Start.Equal(got.FirstMissing), what)
	}
	require.Equal(f.t,
		[]int64{want.Complete, want.Skip, want.Available, want.Backoff, want.Parked, want.Acquired, want.LeaseExpired, want.Missing, want.NotDue},
		[]int64{got.Complete, got.Skip, got.Available, got.Backoff, got.Parked, got.Acquired, got.LeaseExpired, got.Missing, got.NotDue},
		"%s: complete, skip, available, backoff, parked, acquired, expired, missing, not due", what)
	require.True(f.t, want.OldestOpen.Equal(got.OldestOpen), "%s: oldest open %s, want %s", what, got.OldestOpen, want.OldestOpen)
	require.Equal(f.t, wantBuckets, h.Buckets, "%s: heatmap", what)
	require.True(f.t, want.OldestOpen.Equal(h.OldestOpen), "%s: heatmap's oldest open %s, want %s", what, h.OldestOpen, want.OldestOpen)
}
