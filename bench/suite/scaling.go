package suite

import (
	"context"
	"fmt"
	"slices"
)

// runScaling: the cost curves. Locked and lease throughput at each worker
// count, each against its own statements replayed at the same
// concurrency, and gap detection at each range size against the naive
// anti-join.
func runScaling(ctx context.Context, e *env) ([]Row, error) {
	t, release, err := e.setupThroughput(ctx, "scaling", slices.Max(e.size.scaleWorkers))
	if err != nil {
		return nil, err
	}
	defer release()
	locked, err := t.s.captureLocked(ctx, t.grid, true)
	if err != nil {
		return nil, err
	}
	lease, err := t.s.captureLease(ctx, t.grid)
	if err != nil {
		return nil, err
	}
	var rows []Row
	curve := func(mode string, n int, engine, raw step) error {
		for _, w := range e.size.scaleWorkers {
			sides, err := e.interleave(ctx,
				func(ctx context.Context) (float64, error) { return t.s.drain(ctx, t.grid, n, w, engine) },
				func(ctx context.Context) (float64, error) { return t.s.drain(ctx, t.grid, n, w, raw) })
			if err != nil {
				return err
			}
			rows = append(rows, newRow(fmt.Sprintf("scaling-%s-%d", mode, w), fmt.Sprintf("%s, %d worker(s), %s slots", mode, w, count(n)),
				throughput("almanac"), throughput("raw pgx, same SQL"), sides[0], sides[1], nil))
		}
		return nil
	}
	err = curve("locked", e.size.scaleLocked, lockedStep(t.q),
		func(ctx context.Context, c *counter) (int, error) { return locked.step(ctx, t.pool, 1, c) })
	if err != nil {
		return nil, err
	}
	err = curve("lease", e.size.scaleLease, leaseStep(t.q),
		func(ctx context.Context, c *counter) (int, error) { return lease.step(ctx, t.pool, batchSize, c) })
	if err != nil {
		return nil, err
	}
	for _, n := range e.size.scaleGaps {
		if err := t.s.fresh(ctx, t.grid, 0, ""); err != nil {
			return nil, err
		}
		g, err := t.s.newGapSearch(ctx, fmt.Sprintf("gaps_%d", n), n, e.size.holes)
		if err != nil {
			return nil, err
		}
		row, err := g.measure(ctx, "scaling-gaps-"+count(n), fmt.Sprintf("gaps over %s slots, %d holes", count(n), e.size.holes), nil, false)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row...)
	}
	return rows, nil
}
