package scheduler

import (
	"context"

	"github.com/almanacdev/almanac/coverage"
)

// pruneHistory keeps the slots' history bounded: every SweepInterval it
// deletes the events older than the schema's retention (see
// coverage.PruneHistory). Every scheduler does it; concurrent pruners share
// the work without waiting for each other.
func (s *Scheduler) pruneHistory(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(s.opts.SweepInterval):
		}
		n, err := coverage.PruneHistory(ctx, s.pool, coverage.PruneOptions{Schema: s.opts.Schema})
		switch {
		case err != nil && ctx.Err() == nil:
			s.opts.Logger.Warn("almanac: pruning the slots' history failed", "error", err)
		case n > 0:
			s.opts.Logger.Info("almanac: pruned the slots' history", "events", n)
		}
	}
}
