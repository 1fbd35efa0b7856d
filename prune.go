package almanac

import (
	"context"

	"github.com/almanacdev/almanac/coverage"
)

// pruneHistory keeps the slots' history bounded: every SweepInterval it
// deletes the events older than the schema's retention (see
// coverage.PruneHistory). Every scheduler does it; concurrent pruners share
// the work without waiting for each other.
func (e *engine) pruneHistory(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.opts.Clock.After(e.sweep):
		}
		n, err := coverage.PruneHistory(ctx, e.pool, e.opts.Schema, coverage.WriteOptions{})
		switch {
		case err != nil && ctx.Err() == nil:
			e.opts.Logger.Warn("almanac: pruning the slots' history failed", "error", err)
		case n > 0:
			e.opts.Logger.Info("almanac: pruned the slots' history", "events", n)
		}
	}
}
