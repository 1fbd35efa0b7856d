package coverage

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// The benchmarks work on 1,000,000 PT5M slots and measure the naive SQL
// baseline in the same run, on the same data, reporting both and their
// ratio. They take about a minute:
//
//	go test ./coverage -run '^$' -bench . -benchtime 3x

const benchSlots = 1_000_000

var benchFrom = time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)

func benchTo() time.Time { return benchFrom.Add(benchSlots * 5 * time.Minute) }

// naiveGaps is the baseline: every grid start from a timestamptz
// generate_series, anti-joined with the table.
const naiveGaps = `SELECT g FROM generate_series($3::timestamptz, $4::timestamptz - interval '5 minutes', interval '5 minutes') g
	WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.slot s WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = g)`

// naiveMaterialize is the ceiling: one INSERT … SELECT generate_series into
// the same indexed table.
const naiveMaterialize = `INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
	SELECT $1, $2, g, g + interval '5 minutes'
	FROM generate_series($3::timestamptz, $4::timestamptz - interval '5 minutes', interval '5 minutes') g`

func (f *fixture) vacuum() {
	f.t.Helper()
	_, err := f.db.Pool.Exec(context.Background(), "VACUUM ANALYZE "+sqlschema.Quote(f.db.Schema)+".slot")
	require.NoError(f.t, err)
}

// BenchmarkGaps finds gaps over 1,000,000 slots: with 40 holes of 1 to 20
// slots before and after VACUUM, and with none.
func BenchmarkGaps(b *testing.B) {
	f := newFixture(b, series(b, "bench", "PT5M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from, to := benchFrom, benchTo()
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(b, err)
	rng := rand.New(rand.NewPCG(1, 2))
	holes, missing := 0, 0
	for i := range 40 {
		start := from.Add(time.Duration(i*25_000+rng.IntN(20_000)) * 5 * time.Minute)
		n := 1 + rng.IntN(20)
		missing += int(f.exec(`DELETE FROM {{schema}}.slot WHERE slot_start >= $1 AND slot_start < $2`,
			start, start.Add(time.Duration(n)*5*time.Minute)))
		holes++
	}
	run := func(b *testing.B, wantGaps, wantMissing int) {
		var engine, naive time.Duration
		for b.Loop() {
			t0 := time.Now()
			gaps := f.gaps(from, to)
			engine += time.Since(t0)
			var got int64
			for _, g := range gaps {
				got += g.Slots
			}
			require.Len(b, gaps, wantGaps)
			require.EqualValues(b, wantMissing, got)

			t0 = time.Now()
			rows, err := f.db.Pool.Query(ctx, sqlschema.Render(naiveGaps, f.db.Schema), "bench", "PT5M", from, to)
			require.NoError(b, err)
			starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
			require.NoError(b, err)
			naive += time.Since(t0)
			require.Len(b, starts, wantMissing)
		}
		n := float64(b.N)
		b.ReportMetric(engine.Seconds()*1000/n, "engine-ms")
		b.ReportMetric(naive.Seconds()*1000/n, "naive-ms")
		b.ReportMetric(engine.Seconds()/naive.Seconds(), "ratio")
	}
	b.Run("holes-unvacuumed", func(b *testing.B) { run(b, holes, missing) })
	f.vacuum()
	b.Run("holes", func(b *testing.B) { run(b, holes, missing) })
	_, err = f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(b, err)
	f.vacuum()
	b.Run("complete", func(b *testing.B) { run(b, 0, 0) })
}

// BenchmarkMaterialize inserts 1,000,000 slots into an empty series, and
// compares with one raw INSERT … SELECT generate_series into the same
// table; "concurrent" has eight materializers run over the same range at
// once, against the same single raw insert.
func BenchmarkMaterialize(b *testing.B) {
	f := newFixture(b, series(b, "bench", "PT5M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from, to := benchFrom, benchTo()
	truncate := func() { f.exec(`TRUNCATE {{schema}}.slot`) }
	raw := func() time.Duration {
		truncate()
		t0 := time.Now()
		f.exec(naiveMaterialize, "bench", "PT5M", from, to)
		return time.Since(t0)
	}
	run := func(b *testing.B, materializers int) {
		var engine, naive time.Duration
		for b.Loop() {
			naive += raw()
			truncate()
			t0 := time.Now()
			var wg sync.WaitGroup
			inserted := make([]int64, materializers)
			errs := make([]error, materializers)
			for i := range materializers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := f.c.Materialize(ctx, from, to, WriteOptions{})
					inserted[i], errs[i] = res.Inserted, err
				}()
			}
			wg.Wait()
			engine += time.Since(t0)
			require.NoError(b, errors.Join(errs...))
			var total int64
			for _, n := range inserted {
				total += n
			}
			require.EqualValues(b, benchSlots, total)
		}
		n := float64(b.N)
		b.ReportMetric(engine.Seconds()/n, "engine-s")
		b.ReportMetric(naive.Seconds()/n, "raw-s")
		b.ReportMetric(engine.Seconds()/naive.Seconds(), "ratio")
	}
	b.Run("single", func(b *testing.B) { run(b, 1) })
	b.Run("concurrent-8", func(b *testing.B) { run(b, 8) })
}

// BenchmarkReopenWake measures how long a listening worker waits for the
// notification of a re-open, from the call until it arrives; it reports the
// median.
func BenchmarkReopenWake(b *testing.B) {
	f := newFixture(b, series(b, "wake", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := benchFrom
	to := from.Add(100 * time.Minute)
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(b, err)
	events := f.listen()
	var waits []time.Duration
	for b.Loop() {
		b.StopTimer()
		f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE'`)
		b.StartTimer()
		t0 := time.Now()
		res, err := f.c.Reopen(ctx, from, to, WriteOptions{Reason: "bench"})
		require.NoError(b, err)
		require.EqualValues(b, 100, res.Changed)
		<-events
		waits = append(waits, time.Since(t0))
	}
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds())/1000, "median-ms")
}

// BenchmarkBulkWrites measures the operator's bulk writes over 20,000 PT5M
// slots, each in one call: a re-open of them all (COMPLETE to AVAILABLE),
// a skip of them all, and a retry of them all in backoff; each writes one
// event per slot through the slot table's trigger.
//
//	go test ./coverage -run '^$' -bench BulkWrites -benchtime 3x
func BenchmarkBulkWrites(b *testing.B) {
	const slots = 20_000
	f := newFixture(b, series(b, "bulk", "PT5M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := benchFrom
	to := from.Add(slots * 5 * time.Minute)
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(b, err)
	f.vacuum()
	run := func(b *testing.B, prepare string, op func() (WriteResult, error)) {
		for b.Loop() {
			b.StopTimer()
			f.exec(prepare)
			b.StartTimer()
			res, err := op()
			require.NoError(b, err)
			require.EqualValues(b, slots, res.Changed)
		}
	}
	b.Run("reopen", func(b *testing.B) {
		run(b, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now()`,
			func() (WriteResult, error) { return f.c.Reopen(ctx, from, to, WriteOptions{Reason: "bench"}) })
	})
	b.Run("skip", func(b *testing.B) {
		run(b, `UPDATE {{schema}}.slot SET status = 'AVAILABLE', not_before = NULL`,
			func() (WriteResult, error) { return f.c.Skip(ctx, from, to, WriteOptions{Reason: "bench"}) })
	})
	b.Run("retry", func(b *testing.B) {
		run(b, `UPDATE {{schema}}.slot SET status = 'AVAILABLE', not_before = 'infinity'`,
			func() (WriteResult, error) { return f.c.Retry(ctx, from, to, WriteOptions{}) })
	})
}
