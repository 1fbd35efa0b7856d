package suite

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/slot"
)

// fleetProcesses are the numbers of processes the fleet scenario spreads
// the run's workers over, each no more than there are workers.
var fleetProcesses = []int{2, 4, 8}

// process is one process of a fleet: a pool and a queue of its own, as a
// separate process of the same program has. A queue's floor, where its
// searches start (acquire's floor.go), is its own; the processes split a
// backlog through the series' frontier (acquire's frontier.go), which
// they reach only through the database, as separate processes do.
type process struct {
	pool    *pgxpool.Pool
	q       *acquire.Queue
	workers int
}

// fleet is the processes of one side of the fleet scenario.
type fleet []process

// newFleet opens a process for each count of workers.
func (e *env) newFleet(ctx context.Context, s *schema, grid slot.Series, workers []int) (fleet, error) {
	var f fleet
	for _, w := range workers {
		pool, err := e.workerPool(ctx, w)
		if err != nil {
			f.close()
			return nil, err
		}
		q, err := acquire.New(ctx, pool, grid, acquire.Options{Schema: s.name, Reserve: reserve})
		if err != nil {
			pool.Close()
			f.close()
			return nil, err
		}
		f = append(f, process{pool, q, w})
	}
	return f, nil
}

func (f fleet) close() {
	for _, p := range f {
		p.pool.Close()
	}
}

// steps returns a step of mode for each worker of each process, on that
// process's queue.
func (f fleet) steps(mode func(*acquire.Queue) step) []step {
	var out []step
	for _, p := range f {
		for range p.workers {
			out = append(out, mode(p.q))
		}
	}
	return out
}

// spread divides workers over processes as evenly as it goes.
func spread(workers, processes int) []int {
	out := make([]int, processes)
	for i := range out {
		out[i] = workers / processes
		if i < workers%processes {
			out[i]++
		}
	}
	return out
}

// fleetModes are the modes the fleet scenario runs: a row ID's prefix, the
// name of the mode, and its step on a queue.
var fleetModes = []struct {
	id, name string
	step     func(*acquire.Queue) step
}{
	{"fleet", "batched locked", batchStep},
	{"fleet-lease", fmt.Sprintf("lease, claim %d + complete many", batchSize), leaseStep},
}

// runFleet: batched locked and lease mode with the run's workers spread
// over 2, 4 and 8 processes against all of them in one process, in the
// same run. Each row's note gives the entries of slot_available_idx both
// sides read per slot: one when no search steps over a slot it does not
// take.
func runFleet(ctx context.Context, e *env) ([]Row, error) {
	n := e.size.batch
	s, grid, err := e.newBenchSeries(ctx, "fleet")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	one, err := e.newFleet(ctx, s, grid, []int{e.workers})
	if err != nil {
		return nil, err
	}
	defer one.close()
	var rows []Row
	for _, mode := range fleetModes {
		for _, p := range fleetProcesses {
			if p > e.workers {
				continue
			}
			many, err := e.newFleet(ctx, s, grid, spread(e.workers, p))
			if err != nil {
				return nil, err
			}
			var read [2][]float64
			sides, err := e.interleave(ctx,
				func(ctx context.Context) (float64, error) {
					return s.drainReading(ctx, grid, n, many, many.steps(mode.step), &read[0])
				},
				func(ctx context.Context) (float64, error) {
					return s.drainReading(ctx, grid, n, one, one.steps(mode.step), &read[1])
				})
			many.close()
			if err != nil {
				return nil, err
			}
			row := newRow(fmt.Sprintf("%s-%d", mode.id, p), fmt.Sprintf("%s, %d workers in %d processes, %s slots", mode.name, e.workers, p, count(n)),
				throughput("almanac"), throughput(fmt.Sprintf("one process of %d workers", e.workers)), sides[0], sides[1], nil)
			if len(read[0]) > 0 && len(read[1]) > 0 {
				row.Note = fmt.Sprintf("slot_available_idx entries read per slot: %.1f in %d processes, %.1f in one", median(read[0]), p, median(read[1]))
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// drainReading is drainEach, and appends to read the entries of
// slot_available_idx the drain read per slot, as the server counts them
// once f's connections have reported their statistics. A server that
// cannot be told to report them now (before PostgreSQL 15) leaves read as
// it is.
func (s *schema) drainReading(ctx context.Context, grid slot.Series, n int, f fleet, steps []step, read *[]float64) (float64, error) {
	before, ok, err := s.entriesRead(ctx, f)
	if err != nil {
		return 0, err
	}
	rate, err := s.drainEach(ctx, grid, n, steps)
	if err != nil || !ok {
		return rate, err
	}
	after, _, err := s.entriesRead(ctx, f)
	if err != nil {
		return 0, err
	}
	*read = append(*read, float64(after-before)/float64(n))
	return rate, nil
}

// entriesRead returns how many entries scans of the schema's
// slot_available_idx have read, once f's connections and the bench's own
// have reported their statistics; false when the server cannot be told to
// report them.
func (s *schema) entriesRead(ctx context.Context, f fleet) (int64, bool, error) {
	for _, pool := range append([]*pgxpool.Pool{s.e.admin}, f.pools()...) {
		for _, c := range pool.AcquireAllIdle(ctx) {
			// A backend reports its statistics when it is next idle.
			_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
			if err == nil {
				_, err = c.Exec(ctx, `SELECT 1`)
			}
			c.Release()
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42883" {
				return 0, false, nil // undefined function: before PostgreSQL 15
			}
			if err != nil {
				return 0, false, fmt.Errorf("report statistics: %w", err)
			}
		}
	}
	var n int64
	err := s.e.admin.QueryRow(ctx, `SELECT pg_stat_get_tuples_returned($1::regclass)`, quote(s.name)+".slot_available_idx").Scan(&n)
	if err != nil {
		return 0, false, fmt.Errorf("read index statistics: %w", err)
	}
	return n, true, nil
}

func (f fleet) pools() []*pgxpool.Pool {
	out := make([]*pgxpool.Pool, len(f))
	for i, p := range f {
		out[i] = p.pool
	}
	return out
}
