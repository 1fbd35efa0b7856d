package suite

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sizes are the amounts of work of each scenario.
type sizes struct {
	locked       int   // slots per locked-mode measurement
	batch        int   // slots, and River jobs, per batched or lease measurement
	gaps         int   // slots of the gap-detection range
	holes        int   // holes punched for the gap searches
	materialize  int   // slots materialized per measurement
	wakes        int   // re-opens per wake-up measurement
	scaleLocked  int   // slots per locked-mode scaling measurement
	scaleLease   int   // slots per lease-mode scaling measurement
	scaleWorkers []int // worker counts of the scaling curve
	scaleGaps    []int // range sizes of the gap-detection curve
	memory       int   // slots of the big series of the memory scenario
	memorySmall  int   // slots of its small series
}

// fullSizes are the sizes the bars are stated for.
var fullSizes = sizes{
	locked: 10_000, batch: 100_000, gaps: 1_000_000, holes: 50, materialize: 1_000_000, wakes: 100,
	scaleLocked: 4_000, scaleLease: 40_000, scaleWorkers: []int{1, 4, 16},
	scaleGaps: []int{10_000, 100_000}, memory: 1_000_000, memorySmall: 1_000,
}

// quickSizes run every scenario in seconds.
var quickSizes = sizes{
	locked: 320, batch: 3_200, gaps: 20_000, holes: 50, materialize: 20_000, wakes: 20,
	scaleLocked: 160, scaleLease: 1_600, scaleWorkers: []int{1, 4, 16},
	scaleGaps: []int{1_000, 5_000}, memory: 20_000, memorySmall: 1_000,
}

// env is the state of one run shared by its scenarios.
type env struct {
	opts             Options
	repeats, workers int
	size             sizes
	admin            *pgxpool.Pool

	// canCheckpoint is cleared when the role may not run CHECKPOINT.
	canCheckpoint bool
	// pgbench runs the ceilings; nil with pgbenchWhy set when it cannot.
	pgbench    *pgbench
	pgbenchWhy string

	scenario    string
	done, total int64
}

// advance reports one more measurement of the running scenario.
func (e *env) advance() {
	e.done++
	if e.opts.Progress != nil {
		e.opts.Progress(e.scenario, e.done, e.total)
	}
}

// pool opens a pool of maxConns connections on the benchmarked database
// and warms it: every connection is opened before it is returned, so no
// measurement pays for connecting (almanac's, the raw loops' and River's
// pools alike).
func (e *env) pool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg := e.admin.Config()
	cfg.MaxConns = int32(maxConns)
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if err := warm(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// warm opens every connection of pool at once and gives them back idle.
func warm(ctx context.Context, pool *pgxpool.Pool) error {
	n := int(pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conns[i], errs[i] = pool.Acquire(ctx)
			if errs[i] == nil {
				errs[i] = conns[i].Ping(ctx)
			}
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("warm pool: %w", err)
	}
	return nil
}

// checkpoint flushes dirty buffers before a write-heavy measurement, so a
// checkpoint of an earlier load does not land in the middle of it. A role
// without the privilege measures without.
func (e *env) checkpoint(ctx context.Context) error {
	if !e.canCheckpoint {
		return nil
	}
	_, err := e.admin.Exec(ctx, "CHECKPOINT")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		e.canCheckpoint = false
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
