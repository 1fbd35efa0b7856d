package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/scheduler"
	"github.com/almanacdev/almanac/slot"
)

// batchSize is the slots per transaction of batched locked mode and per
// claim of lease mode: the scheduler's default batch.
const batchSize = scheduler.DefaultBatch

// step handles some slots and says how many; 0 when none was acquirable.
type step func(ctx context.Context) (int, error)

// drain loads n AVAILABLE slots of grid afresh, then lets workers
// goroutines call step until each finds nothing, and returns slots per
// second. Every slot must end COMPLETE.
func (s *schema) drain(ctx context.Context, grid slot.Series, n, workers int, work step) (float64, error) {
	if err := s.fresh(ctx, grid, n, "AVAILABLE"); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, err := work(ctx)
				if err != nil {
					errs[i] = err
					cancel()
					return
				}
				if k == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	complete, err := s.count(ctx, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`)
	if err != nil {
		return 0, err
	}
	if complete != int64(n) {
		return 0, fmt.Errorf("%d of %d slots COMPLETE after the drain", complete, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// workerPool opens a pool for workers locked-mode workers: one connection
// each, the reserve locked mode never holds, and two for the rest.
func (e *env) workerPool(ctx context.Context, workers int) (*pgxpool.Pool, error) {
	return e.pool(ctx, workers+acquire.DefaultReserve+2)
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
	if t.q, err = acquire.New(ctx, t.pool, t.grid, acquire.Options{Schema: t.s.name}); err != nil {
		return fail(err)
	}
	return t, release, nil
}

func lockedStep(q *acquire.Queue) step {
	return func(ctx context.Context) (int, error) {
		_, ok, err := q.Run(ctx, noop)
		if !ok {
			return 0, err
		}
		return 1, err
	}
}

func batchStep(q *acquire.Queue) step {
	return func(ctx context.Context) (int, error) {
		results, err := q.RunBatch(ctx, batchSize, noop)
		return len(results), err
	}
}

func leaseStep(q *acquire.Queue) step {
	return func(ctx context.Context) (int, error) {
		leases, err := q.Claim(ctx, batchSize)
		if err != nil || len(leases) == 0 {
			return 0, err
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
// its own statements replayed by a bare loop of the same concurrency.
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
	p, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, lockedStep(t.q))
		},
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, func(ctx context.Context) (int, error) { return raw.step(ctx, t.pool, 1) })
		})
	if err != nil {
		return nil, err
	}
	return []Row{p.row("locked", fmt.Sprintf("locked, 1 slot/tx, no-op, %d workers, %s slots", e.workers, count(n)),
		throughput("almanac"), throughput("raw pgx, same SQL"), &Bar{AtLeast: true, Value: 0.9})}, nil
}

// runBatch: batched locked mode against River on the same number of jobs,
// and against its own statements replayed by a bare loop.
func runBatch(ctx context.Context, e *env) ([]Row, error) {
	name := fmt.Sprintf("batched locked, %d slots/tx, no-op, %d workers, %s slots", batchSize, e.workers, count(e.size.batch))
	t, release, err := e.setupThroughput(ctx, "batch", e.workers)
	if err != nil {
		return nil, err
	}
	defer release()
	river, err := e.versusRiver(ctx, t, "batch-vs-river", name, batchStep(t.q), &Bar{AtLeast: true, Value: 2})
	if err != nil {
		return nil, err
	}
	raw, err := t.s.captureLocked(ctx, t.grid, false)
	if err != nil {
		return nil, err
	}
	n := e.size.batch
	p, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, batchStep(t.q))
		},
		func(ctx context.Context) (float64, error) {
			return t.s.drain(ctx, t.grid, n, e.workers, func(ctx context.Context) (int, error) { return raw.step(ctx, t.pool, batchSize) })
		})
	if err != nil {
		return nil, err
	}
	return []Row{river, p.row("batch-vs-raw", name, throughput("almanac"), throughput("raw pgx, same SQL"), nil)}, nil
}

// runLease: lease mode with batched claims and completions against River.
func runLease(ctx context.Context, e *env) ([]Row, error) {
	t, release, err := e.setupThroughput(ctx, "lease", e.workers)
	if err != nil {
		return nil, err
	}
	defer release()
	row, err := e.versusRiver(ctx, t, "lease-vs-river",
		fmt.Sprintf("lease, claim %d + complete many, no-op, %d workers, %s slots", batchSize, e.workers, count(e.size.batch)),
		leaseStep(t.q), &Bar{AtLeast: true, Value: 1, Stretch: 1.5})
	if err != nil {
		return nil, err
	}
	return []Row{row}, nil
}

// versusRiver measures a mode against River working as many no-op jobs
// with the same pool size. When River cannot be run here, the engine is
// still measured and the row is skipped with the reason.
func (e *env) versusRiver(ctx context.Context, t throughputSetup, id, name string, work step, bar *Bar) (Row, error) {
	n := e.size.batch
	engine := func(ctx context.Context) (float64, error) { return t.s.drain(ctx, t.grid, n, e.workers, work) }
	river := e.riverRunner(ctx)
	if river.why != "" {
		var p pair
		for range e.repeats {
			v, err := engine(ctx)
			if err != nil {
				return Row{}, err
			}
			p.engine = append(p.engine, v)
			e.advance()
			e.advance()
		}
		r := p.row(id, name, throughput("almanac"), throughput("River"), bar)
		r.Result, r.Note = Skipped, "River not measured: "+river.why
		return r, nil
	}
	p, err := e.interleave(ctx, engine, func(ctx context.Context) (float64, error) {
		return river.run(ctx, e, n, int(t.pool.Config().MaxConns))
	})
	if err != nil {
		return Row{}, err
	}
	return p.row(id, name, throughput("almanac"), throughput("River"), bar), nil
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
