package bench

import (
	"context"
	"errors"
	"fmt"

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

// fullSizes are the sizes DESIGN.md's bars are stated for.
var fullSizes = sizes{
	locked: 20_000, batch: 100_000, gaps: 1_000_000, holes: 50, materialize: 1_000_000, wakes: 200,
	scaleLocked: 5_000, scaleLease: 50_000, scaleWorkers: []int{1, 2, 4, 8, 16},
	scaleGaps: []int{10_000, 100_000, 1_000_000}, memory: 1_000_000, memorySmall: 1_000,
}

// quickSizes run every scenario in seconds.
var quickSizes = sizes{
	locked: 300, batch: 2_000, gaps: 20_000, holes: 50, materialize: 20_000, wakes: 20,
	scaleLocked: 100, scaleLease: 1_000, scaleWorkers: []int{1, 2, 4, 8, 16},
	scaleGaps: []int{1_000, 5_000, 20_000}, memory: 20_000, memorySmall: 1_000,
}

// env is the state of one run shared by its scenarios.
type env struct {
	opts             Options
	repeats, workers int
	size             sizes
	admin            *pgxpool.Pool

	// canCheckpoint is cleared when the role may not run CHECKPOINT.
	canCheckpoint bool
	river         *riverRunner // built on first use

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

// pool opens a pool of maxConns connections on the benchmarked database.
func (e *env) pool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg := e.admin.Config()
	cfg.MaxConns = int32(maxConns)
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, nil
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

// cleanup removes what the run left on disk.
func (e *env) cleanup() {
	if e.river != nil {
		e.river.remove()
	}
}
