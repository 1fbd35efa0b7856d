package acquire

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// benchWorkers is the concurrency of the benchmarks, the bench suite's
// default workers (BENCHMARKS.md).
const benchWorkers = 8

// benchmarkMode runs benchmarkModeWith with pgx's default statement
// handling (prepared and cached) and with the exec mode that poolers in
// transaction mode need (no named prepared statements), as sub-benchmarks.
func benchmarkMode(b *testing.B, step func(ctx context.Context, q *Queue) (int, error)) {
	benchmarkCase(b, benchSetup{}, step)
}

// benchSetup is what a benchmark does to its fixture's series before the
// workers start: a cap (max_in_flight) when limit is above 0.
type benchSetup struct{ limit int }

// benchmarkCase is benchmarkMode on a series set up by setup.
func benchmarkCase(b *testing.B, setup benchSetup, step func(ctx context.Context, q *Queue) (int, error)) {
	b.Run("prepared", func(b *testing.B) { benchmarkModeWith(b, pgx.QueryExecModeCacheStatement, setup, step) })
	b.Run("exec", func(b *testing.B) { benchmarkModeWith(b, pgx.QueryExecModeExec, setup, step) })
}

// benchmarkModeWith materializes b.N slots, applies setup, then lets
// benchWorkers goroutines drain them with step, which returns how many
// slots it handled, on a pool running statements in mode, and reports
// slots per second. A worker stops when step handles none; under a cap,
// where a step comes back empty while other workers hold the slots it
// admits, only once every slot is done.
func benchmarkModeWith(b *testing.B, mode pgx.QueryExecMode, setup benchSetup, step func(ctx context.Context, q *Queue) (int, error)) {
	f := newFixture(b, b.N)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(b))
	require.NoError(b, err)
	cfg.MaxConns = benchWorkers + defaultReserve + 2
	cfg.ConnConfig.DefaultQueryExecMode = mode
	ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	defer pool.Close()
	if setup.limit > 0 {
		f.exec(`UPDATE {{schema}}.series SET max_in_flight = $1`, setup.limit)
	}
	q := f.queueOn(pool, Options{})
	_, err = pool.Exec(context.Background(), "VACUUM ANALYZE "+f.schema+".slot")
	require.NoError(b, err)
	ctx := context.Background()
	var wg sync.WaitGroup
	var done atomic.Int64
	cpu := serverCPU(ctx, b, pool, benchWorkers)
	b.ResetTimer()
	start := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := step(ctx, q)
				if err != nil {
					b.Error(err)
					return
				}
				if n == 0 && (setup.limit == 0 || done.Load() >= int64(b.N)) {
					return
				}
				done.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "slots/s")
	if used := serverCPU(ctx, b, pool, 0).since(cpu); used > 0 {
		b.ReportMetric(float64(used.Microseconds())/float64(b.N), "server-cpu-µs/slot")
	}
	require.Equal(b, b.N, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
}

// cpuTimes is the CPU time each server process behind a pool's
// connections has used, by process id.
type cpuTimes map[uint32]time.Duration

// serverCPU opens at least open connections of pool, then reads the CPU
// time the server processes behind its idle connections have used, from
// /proc/PID/schedstat: the server runs on this machine in the tests. On a
// machine shared with other work, wall-clock throughput moves with the
// load; the CPU time the server spends per slot moves far less. Nil when
// it cannot be read.
func serverCPU(ctx context.Context, b *testing.B, pool *pgxpool.Pool, open int) cpuTimes {
	var held []*pgxpool.Conn
	for range open {
		c, err := pool.Acquire(ctx)
		require.NoError(b, err)
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	times := cpuTimes{}
	for _, c := range pool.AcquireAllIdle(ctx) {
		pid := c.Conn().PgConn().PID()
		c.Release()
		var ns int64
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return nil
		}
		if _, err := fmt.Sscan(string(data), &ns); err != nil {
			return nil
		}
		times[pid] = time.Duration(ns)
	}
	return times
}

// since is the CPU time used between before and t, by the processes in t
// (one that is not in before started since).
func (t cpuTimes) since(before cpuTimes) time.Duration {
	if t == nil || before == nil {
		return 0
	}
	var d time.Duration
	for pid, used := range t {
		d += used - before[pid]
	}
	return d
}

// TestBenchmarkSlotsAreDue: however many slots a benchmark asks for, its
// fixture's are all due, or the benchmark's workers stop at the first one
// that is not and its count of the slots done falls short (a fixture that
// ends in the future does, whatever the machine's speed).
func TestBenchmarkSlotsAreDue(t *testing.T) {
	require.True(t, fixtureEnd.Before(time.Now()))
	require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), fixtureFrom(100))
	for _, n := range []int{100, 100_000, 694_268, 10_000_000} {
		require.False(t, fixtureFrom(n).Add(time.Duration(n)*time.Minute).After(fixtureEnd), "%d slots", n)
	}
}

func noop(context.Context, pgx.Tx, Slot) error { return nil }

// BenchmarkLocked: locked mode, one slot per transaction, no-op handler.
func BenchmarkLocked(b *testing.B) {
	benchmarkMode(b, func(ctx context.Context, q *Queue) (int, error) {
		_, ok, err := q.Run(ctx, noop)
		if ok {
			return 1, err
		}
		return 0, err
	})
}

// BenchmarkLockedBatch: batched locked mode, 100 slots per transaction.
func BenchmarkLockedBatch(b *testing.B) {
	benchmarkMode(b, func(ctx context.Context, q *Queue) (int, error) {
		results, err := q.RunBatch(ctx, 100, noop)
		return len(results), err
	})
}

// BenchmarkLease: lease mode, claims and completions of 100 at a time.
func BenchmarkLease(b *testing.B) {
	benchmarkMode(b, func(ctx context.Context, q *Queue) (int, error) {
		leases, err := q.Claim(ctx, 100)
		if err != nil || len(leases) == 0 {
			return 0, err
		}
		_, err = q.CompleteMany(ctx, leases)
		return len(leases), err
	})
}

// benchCaps are the caps of the capped benchmarks: 1,000, which the
// workers never reach (what admission costs), and 8, one slot per worker
// (what throttling costs).
var benchCaps = []int{1000, 8}

// BenchmarkLockedBatchCapped is BenchmarkLockedBatch on a series with a
// cap (max_in_flight), by cap.
func BenchmarkLockedBatchCapped(b *testing.B) {
	for _, limit := range benchCaps {
		b.Run(strconv.Itoa(limit), func(b *testing.B) {
			benchmarkCase(b, benchSetup{limit: limit}, func(ctx context.Context, q *Queue) (int, error) {
				results, err := q.RunBatch(ctx, 100, noop)
				return len(results), err
			})
		})
	}
}

// BenchmarkLeaseCapped is BenchmarkLease on a series with a cap, by cap.
func BenchmarkLeaseCapped(b *testing.B) {
	for _, limit := range benchCaps {
		b.Run(strconv.Itoa(limit), func(b *testing.B) {
			benchmarkCase(b, benchSetup{limit: limit}, func(ctx context.Context, q *Queue) (int, error) {
				leases, err := q.Claim(ctx, 100)
				if err != nil || len(leases) == 0 {
					return 0, err
				}
				_, err = q.CompleteMany(ctx, leases)
				return len(leases), err
			})
		})
	}
}

// BenchmarkRunAcross: b.N series with one due slot each (a boundary of
// many series), worked by benchWorkers goroutines with RunAcross over 100
// series at a time; reports slots per second.
func BenchmarkRunAcross(b *testing.B) {
	f := newAcrossFixture(b, b.N, 1)
	ctx := context.Background()
	_, err := f.db.Pool.Exec(ctx, "VACUUM ANALYZE "+f.schema+".slot")
	require.NoError(b, err)
	chunks := make(chan []*Queue, b.N/100+1)
	for c := range slices.Chunk(f.queues, 100) {
		chunks <- c
	}
	close(chunks)
	nop := func(context.Context, pgx.Tx, Slot) error { return nil }
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for qs := range chunks {
				hs := make([]Handler, len(qs))
				for i := range hs {
					hs[i] = nop
				}
				if _, err := RunAcross(ctx, qs, hs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "slots/s")
	require.Equal(b, b.N, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
}
