package suite

import (
	"context"
	"fmt"
	"time"

	"github.com/almanacdev/almanac/coverage"
)

// rawMaterialize is the ceiling of materialization: one INSERT … SELECT
// generate_series into the same indexed table.
const rawMaterialize = `INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
	SELECT $1, $2, g, g + interval '1 minute'
	FROM generate_series($3::timestamptz, $4::timestamptz - interval '1 minute', interval '1 minute') AS g`

// runMaterialize: materializing the full run's range into an empty series
// against one raw INSERT … SELECT of the same rows.
func runMaterialize(ctx context.Context, e *env) ([]Row, error) {
	return materialize(ctx, e, "materialize", e.size.materialize)
}

// runMaterialize10M: the same over 10M slots (quick: 100k), the size the
// bar is stated for; minutes per measurement, so only run when selected.
func runMaterialize10M(ctx context.Context, e *env) ([]Row, error) {
	n := 10_000_000
	if e.opts.Quick {
		n = 100_000
	}
	return materialize(ctx, e, "materialize-10m", n)
}

// materialize measures materializing n slots against INSERT … SELECT in
// a row named id.
func materialize(ctx context.Context, e *env, id string, n int) ([]Row, error) {
	s, grid, err := e.newBenchSeries(ctx, "materialize")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	cov, err := coverage.New(ctx, e.admin, grid, coverage.Options{Schema: s.name})
	if err != nil {
		return nil, err
	}
	timed := func(ctx context.Context, insert func() (int64, error)) (float64, error) {
		if err := s.fresh(ctx, grid, 0, ""); err != nil {
			return 0, err
		}
		start := time.Now()
		inserted, err := insert()
		elapsed := time.Since(start)
		if err != nil {
			return 0, err
		}
		if inserted != int64(n) {
			return 0, fmt.Errorf("inserted %d slots, expected %d", inserted, n)
		}
		return elapsed.Seconds(), nil
	}
	sides, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			return timed(ctx, func() (int64, error) {
				res, err := cov.Materialize(ctx, at(0), at(n), coverage.WriteOptions{})
				return res.Inserted, err
			})
		},
		func(ctx context.Context) (float64, error) {
			return timed(ctx, func() (int64, error) {
				return s.exec(ctx, rawMaterialize, grid.Name(), grid.Interval().String(), at(0), at(n))
			})
		})
	if err != nil {
		return nil, err
	}
	return []Row{newRow(id, fmt.Sprintf("materialize %s slots into an empty series", count(n)),
		Figure{Label: "almanac", Unit: Seconds}, Figure{Label: "INSERT … SELECT", Unit: Seconds}, sides[0], sides[1], &Bar{Value: 1.1})}, nil
}
