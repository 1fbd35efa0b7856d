package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/slot"
)

// batchSize is the slots per transaction of batched locked mode and per
// claim of lease mode: the default of almanac.Job.Batch.
const batchSize = 100

// step handles some slots, records each handler run in c, and says how
// many it handled; 0 when none was acquirable.
type step func(ctx context.Context, c *counter) (int, error)

// drain loads n AVAILABLE slots of grid afresh, then lets workers
// goroutines call step until each finds nothing, and returns slots per
// second from the moment the workers start to the last commit. Every slot
// must have been handled exactly once (counted by the steps) and be
// COMPLETE in the table; otherwise the measurement fails.
func (s *schema) drain(ctx context.Context, grid slot.Series, n, workers int, work step) (float64, error) {
	return s.drainEach(ctx, grid, n, slices.Repeat([]step{work}, workers))
}

// drainEach is drain with a goroutine for each of steps, calling its own.
func (s *schema) drainEach(ctx context.Context, grid slot.Series, n int, steps []step) (float64, error) {
	if err := s.fresh(ctx, grid, n, "AVAILABLE"); err != nil {
		return 0, err
	}
	c := newCounter(n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	start := time.Now()
	for i, work := range steps {
		wg.Go(func() {
			for {
				k, err := work(ctx, c)
				if err != nil {
					errs[i] = err
					cancel()
					return
				}
				if k == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if err := c.check("almanac"); err != nil {
		return 0, err
	}
	complete, err := s.count(ctx, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`)
	if err != nil {
		return 0, err
	}
	if complete != int64(n) {
		return 0, fmt.Errorf("%w: %d of %d slots COMPLETE after the drain", ErrNotExactlyOnce, complete, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// reserve is how many connections of a pool locked mode leaves free
// (acquire.Options.Reserve); the suite's queues say it, and their pools are
// sized with it.
const reserve = 2

// workerPool opens a warm pool for workers locked-mode workers: one
// connection each, the reserve locked mode never holds, and two for the
// rest.
func (e *env) workerPool(ctx context.Context, workers int) (*pgxpool.Pool, error) {
	return e.pool(ctx, workers+reserve+2)
}

// throughputSetup is what a throughput scenario works on.
type throughputSetup struct {
	s    *schema
	grid slot.Series
	pool *pgxpool.Pool
	q    *acquire.Queue
}

// setupThroughput creates a scenario's schema, series, pool for workers
// workers and queue; release frees them.
func (e *env) setupThroughput(ctx context.Context, tag string, workers int) (t throughputSetup, release func(), err error) {
	t.s, err = e.newSchema(ctx, tag)
	if err != nil {
		return t, nil, err
	}
	release = t.s.drop
	fail := func(err error) (throughputSetup, func(), error) {
		release()
		return throughputSetup{}, nil, err
	}
	if t.grid, err = t.s.series(ctx, "bench"); err != nil {
		return fail(err)
	}
	if t.pool, err = e.workerPool(ctx, workers); err != nil {
		return fail(err)
	}
	release = func() { t.pool.Close(); t.s.drop() }
	if t.q, err = acquire.New(ctx, t.pool, t.grid, acquire.Options{Schema: t.s.name, Reserve: reserve}); err != nil {
		return fail(err)
	}
	return t, release, nil
}

// counting is a no-op handler that records its run.
func counting(c *counter) acquire.Handler {
	return func(_ context.Context, _ pgx.Tx, s acquire.Slot) error {
		c.ran(index(s.Start))
		return nil
	}
}

func lockedStep(q *acquire.Queue) step {
	return func(ctx context.Context, c *counter) (int, error) {
		_, ok, err := q.Run(ctx, counting(c))
		if !ok {
			return 0, err
		}
		return 1, err
	}
}

func batchStep(q *acquire.Queue) step {
	return func(ctx context.Context, c *counter) (int, error) {
		results, err := q.RunBatch(ctx, batchSize, counting(c))
		return len(results), err
	}
}

// leaseStep claims a batch, runs the (no-op) handler of each lease, and
// completes them together.
func leaseStep(q *acquire.Queue) step {
	return func(ctx context.Context, c *counter) (int, error) {
		leases, err := q.Claim(ctx, batchSize)
		if err != nil || len(leases) == 0 {
			return 0, err
		}
		for _, l := range leases {
			c.ran(index(l.Slot.Start))
		}
		lost, err := q.CompleteMany(ctx, leases)
		if err == nil && len(lost) > 0 {
			err = fmt.Errorf("%d leases lost", len(lost))
		}
		return len(leases), err
	}
}

func throughput(label string) Figure { return Figure{Label: label, Unit: SlotsPerSecond} }

// runLocked: locked mode, one slot per transaction, no-op handler, against
// its own statements replayed by a bare loop of the same concurrency, and
// pgbench's ceiling of one claim and completion per transaction.
func runLocked(ctx context.Context, e *env) ([]Row, error) {
	t, closeAll, err := e.setupThroughput(ctx, "locked", e.workers)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	raw, err := t.s.captureLocked(ctx, t.grid, true)
	if err != nil {
		return nil, err
	}
	n := e.size.locked
	ceiling, why := e.ceiling(ctx, shapeLocked1, n, e.workers)
	sides, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, lockedStep(t.q))
		},
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, func(ctx context.Context, c *counter) (int, error) { return raw.step(ctx, t.pool, 1, c) })
		}, ceiling)
	if err != nil {
		return nil, err
	}
	row := newRow("locked", fmt.Sprintf("locked, 1 slot/tx, no-op, %d workers, %s slots", e.workers, count(n)),
		throughput("almanac"), throughput("raw pgx, same SQL"), sides[0], sides[1], &Bar{AtLeast: true, Value: 0.95})
	return []Row{row.withCeiling(sides[2], why)}, nil
}

// runBatch: batched locked mode against River on the same number of jobs,
// against its own statements replayed by a bare loop, and against
// pgbench's ceiling of the same shape.
func runBatch(ctx context.Context, e *env) ([]Row, error) {
	n := e.size.batch
	name := fmt.Sprintf("batched locked, %d slots/tx, no-op, %d workers, %s slots", batchSize, e.workers, count(n))
	t, release, err := e.setupThroughput(ctx, "batch", e.workers)
	if err != nil {
		return nil, err
	}
	defer release()
	raw, err := t.s.captureLocked(ctx, t.grid, false)
	if err != nil {
		return nil, err
	}
	river, err := e.newRiver(ctx, int(t.pool.Config().MaxConns))
	if err != nil {
		return nil, err
	}
	defer river.close()
	ceiling, why := e.ceiling(ctx, shapeLocked100, n, e.workers)
	sides, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, batchStep(t.q))
		},
		func(ctx context.Context) (float64, error) { return river.run(ctx, n) },
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, func(ctx context.Context, c *counter) (int, error) {
				return raw.step(ctx, t.pool, batchSize, c)
			})
		}, ceiling)
	if err != nil {
		return nil, err
	}
	vsRiver := newRow("batch-vs-river", name, throughput("almanac"), throughput("River"), sides[0], sides[1], &Bar{AtLeast: true, Value: 3})
	vsRaw := newRow("batch-vs-raw", name, throughput("almanac"), throughput("raw pgx, same SQL"), sides[0], sides[2], nil)
	return []Row{vsRiver.withCeiling(sides[3], why), vsRaw.withCeiling(sides[3], why)}, nil
}

// runLease: lease mode with batched claims and completions against River
// and against pgbench's ceiling of the same shape.
func runLease(ctx context.Context, e *env) ([]Row, error) {
	n := e.size.batch
	t, release, err := e.setupThroughput(ctx, "lease", e.workers)
	if err != nil {
		return nil, err
	}
	defer release()
	river, err := e.newRiver(ctx, int(t.pool.Config().MaxConns))
	if err != nil {
		return nil, err
	}
	defer river.close()
	ceiling, why := e.ceiling(ctx, shapeLease100, n, e.workers)
	sides, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, leaseStep(t.q))
		},
		func(ctx context.Context) (float64, error) { return river.run(ctx, n) },
		ceiling)
	if err != nil {
		return nil, err
	}
	row := newRow("lease-vs-river", fmt.Sprintf("lease, claim %d + complete many, no-op, %d workers, %s slots", batchSize, e.workers, count(n)),
		throughput("almanac"), throughput("River"), sides[0], sides[1], &Bar{AtLeast: true, Value: 1.5})
	return []Row{row.withCeiling(sides[2], why)}, nil
}

// count formats a number of slots: 1,000,000 as 1M, 20,000 as 20k.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmt.Sprint(n)
}
