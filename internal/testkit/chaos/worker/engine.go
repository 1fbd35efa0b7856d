package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// The engine's settings in this worker: a poll every second, so that a
// killed worker's expired leases are found soon after they expire, and a
// short shutdown, so that SIGTERM ends the worker within the suite's bound.
const (
	enginePoll     = time.Second
	engineShutdown = 5 * time.Second
	// engineBatch is the batch of a batched locked-mode job (Job.Batch).
	engineBatch = 4
)

// leaseOwner reads the owner of the lease holding fence from the slot's
// row: the engine's queues do not show theirs. It is read before the
// attempt is recorded, so the ledger names the owner whose guard the
// completion must pass; a lease lost already leaves it unknown (nil), and
// its writes are refused anyway.
const leaseOwner = `SELECT owner FROM {{schema}}.slot
WHERE name = $1 AND "interval" = $2 AND slot_start = $3 AND fence = $4 AND status = 'ACQUIRED'`

// engineSeries names series i of the engine's many: <prefix>_0042. The
// suite names them the same way (seriesNames).
func engineSeries(prefix string, i int) string { return fmt.Sprintf("%s_%04d", prefix, i) }

// runEngine works -series-count series with the root package's engine:
// one almanac.Client with a job per series over [-from, -to) (Job.From and
// To, a backfill the engine materializes itself as it starts), each job
// capped at one worker (Job.Concurrency), all in the worker's mode. It
// runs until ctx is done, then stops the client.
func (w *worker) runEngine(ctx context.Context, iv slot.Interval) error {
	cfg := w.cfg
	client, err := almanac.New(w.pool, almanac.Options{Schema: cfg.schema, Logger: w.log, Concurrency: cfg.concurrency,
		PollInterval: enginePoll, ShutdownTimeout: engineShutdown})
	if err != nil {
		return err
	}
	// Each handler run draws from a generator of its own: the engine calls
	// handlers from many goroutines.
	var runs atomic.Uint64
	rng := func() *rand.Rand { return rand.New(rand.NewPCG(cfg.seed, runs.Add(1))) }
	locked := func(ctx context.Context, tx pgx.Tx, s acquire.Slot) error { return w.engineLocked(ctx, tx, s, rng()) }
	lease := func(ctx context.Context, l *acquire.Lease) error { return w.engineLease(ctx, l, rng()) }
	for i := range cfg.seriesCount {
		grid, err := slot.NewSeries(engineSeries(cfg.series, i), iv, time.UTC, time.Time{})
		if err != nil {
			return err
		}
		j := almanac.Job{Series: grid, From: cfg.from, To: cfg.to, Concurrency: 1, Policy: cfg.policy()}
		switch cfg.mode {
		case "lease":
			j.LeaseHandler = lease
		case "batch":
			j.Handler, j.Batch = locked, engineBatch
		default:
			j.Handler = locked
		}
		if err := client.Register(j); err != nil {
			return err
		}
	}
	// Start retries faults (a restarting server) until ctx ends.
	if err := client.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // shut down before starting
		}
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*engineShutdown)
	defer cancel()
	return client.Stop(sctx)
}

// engineLocked is a locked-mode (or batched) job's handler: it records the
// attempt, does lockedWork, and records what it asked the engine for
// ("handled", "skip", "fail" or "error"). Whether the slot's transaction
// then commits is the engine's to say: the ledger's end precedes it, and
// the effect row is the proof of the commit.
func (w *worker) engineLocked(ctx context.Context, tx pgx.Tx, s acquire.Slot, rng *rand.Rand) error {
	if err := w.ledger.begin(ctx, s, uuid.Nil, time.Time{}); err != nil {
		w.ledger.abort(ctx, s, err)
		return err
	}
	err := w.lockedWork(ctx, tx, s, rng)
	outcome, detail := "handled", ""
	switch {
	case err == nil:
	case errors.Is(err, errInjected):
		outcome, detail = "fail", err.Error()
	case w.skip(s):
		outcome = "skip"
	default:
		outcome, detail = "error", err.Error()
	}
	w.ledger.finish(ctx, s.Fence, outcome, detail, time.Time{})
	return err
}

// engineLease is a lease-mode job's handler, as lease does it in a claim
// loop of our own: it records the attempt, works under the lease's context
// (the engine's heartbeat cancels it when the lease is lost; we go on to
// write anyway, and that stale write must be refused), and completes with
// the effect in a transaction of its own (complete). A skip or an injected
// failure is returned for the engine to write; the ledger records what was
// asked ("skip", "fail"). On shutdown it returns the context's error, and
// the engine releases the slot.
func (w *worker) engineLease(ctx context.Context, l *acquire.Lease, rng *rand.Rand) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var owner uuid.UUID
	err := retry(ctx, w.log, "lease owner", func() error {
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		defer qcancel()
		var o *uuid.UUID
		err := w.ledger.pool.QueryRow(qctx, sqlschema.Render(leaseOwner, w.cfg.schema), l.Name, l.Interval.String(), l.Start, l.Fence).Scan(&o)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err == nil:
			owner = *o
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := w.ledger.begin(ctx, l.Slot, owner, l.Until()); err != nil {
		w.ledger.abort(ctx, l.Slot, err)
		return err
	}
	var outcome, detail string
	var ret error
	switch {
	case w.skip(l.Slot):
		outcome, ret = "skip", acquire.Skip(skipReason)
	default:
		_ = sleep(ctx, w.work(rng))
		switch {
		case ctx.Err() != nil && !errors.Is(context.Cause(ctx), acquire.ErrLeaseLost):
			outcome, ret = "release", ctx.Err()
		case rng.Float64() < w.cfg.failRate:
			outcome, ret = "fail", errInjected
		default:
			outcome, detail = w.complete(wctx, l)
			if outcome != "complete" {
				ret = fmt.Errorf("completion %s: %s", outcome, detail)
			}
		}
	}
	w.ledger.finish(ctx, l.Fence, outcome, detail, l.Until())
	return ret
}
