package almanac

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/redact"
	"github.com/almanacdev/almanac/internal/retry"
)

// start registers the jobs' series, materializes what is due (applying the
// catch-up policies), and works the jobs in the background until stop:
// triggers materialize newly due slots, idle workers wait for a
// notification (materialize, re-open, retry) or the poll interval, and a
// periodic sweep re-materializes each job's look-back window and prunes the
// slots' history older than the schema's retention. It returns an error
// only when it cannot start (a series registered with another grid, an
// unreachable database).
func (e *engine) start(ctx context.Context) error {
	if err := e.prepare(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	e.stop = func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	go func() {
		defer close(done)
		e.run(runCtx)
	}()
	return nil
}

// run works the prepared jobs until ctx is done, then shuts down.
func (e *engine) run(ctx context.Context) {
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var background sync.WaitGroup
	background.Add(1)
	go func() {
		defer background.Done()
		e.listen(ctx)
	}()
	for _, g := range e.groups() {
		background.Add(1)
		go func() {
			defer background.Done()
			e.driveGroup(ctx, g)
		}()
	}
	background.Add(1)
	go func() {
		defer background.Done()
		e.poll(ctx)
	}()
	background.Add(1)
	go func() {
		defer background.Done()
		e.pruneHistory(ctx)
	}()

	stopObserving := e.observeWorkers()
	defer stopObserving()
	defer e.logStopped(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	e.dispatch(ctx, work, &workers, false)

	// Shutdown: no new work; running handlers get ShutdownTimeout.
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-e.opts.Clock.After(e.opts.ShutdownTimeout):
		e.opts.Logger.Warn("almanac: shutdown timeout: cancelling running handlers", "timeout", e.opts.ShutdownTimeout)
		stopWork()
		<-finished
	}
	background.Wait()
}

// dispatch hands free workers to jobs with work until ctx is done, or, with
// once, until no job has work and no worker runs.
func (e *engine) dispatch(ctx, work context.Context, workers *sync.WaitGroup, once bool) {
	for {
		e.mu.Lock()
		for j := e.pick(); j != nil; j = e.pick() {
			group := append([]*job{j}, e.along(j)...)
			seen := make([]uint64, len(group))
			for i, g := range group {
				g.running++
				seen[i] = g.wakes
			}
			e.running++
			if len(group) == 1 {
				e.ready.push(j) // it may take another worker
			}
			// A job in a batch across series takes no other worker until
			// the batch ends: the batch takes one slot of its series, and
			// the next is for its next batch.
			workers.Add(1)
			go func() {
				defer workers.Done()
				var more []bool
				if len(group) == 1 {
					more = []bool{e.unit(work, j)}
				} else {
					more = e.unitAcross(work, group)
				}
				e.mu.Lock()
				e.running--
				for i, g := range group {
					g.running--
					if len(group) == 1 {
						g.solo = false
					}
					// A wake-up that came while the unit looked may be for
					// a slot it did not see: keep looking then.
					if !more[i] && g.wakes == seen[i] {
						g.hasWork = false
					}
					e.ready.push(g) // with a worker slot free again
				}
				e.mu.Unlock()
				e.pokeDispatcher()
			}()
		}
		// The loop above ended on a nil pick: with no worker running,
		// because the run queue is empty.
		idle := e.running == 0
		e.mu.Unlock()
		if once && idle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-e.poke:
		}
	}
}

// unit does one unit of work for j and reports whether more may be waiting:
// a slot in locked mode, a batch in batched locked mode, a lease in lease
// mode.
// An error (the database unreachable past the retries inside, an outcome
// that could not be recorded) is logged and answered with a pause, then
// more=true: a fault is never taken for the end of the work.
func (e *engine) unit(ctx context.Context, j *job) bool {
	var err error
	more := false
	claimStart := time.Now()
	switch j.mode {
	case modeLocked:
		var res acquire.Result
		var ok bool
		res, ok, err = j.queue.Run(ctx, e.lockedHandler(j, claimStart))
		if ok {
			e.report(j, res)
		}
		more = ok && !e.tookLast(j, res.Slot)
	case modeBatch:
		var results []acquire.Result
		results, err = j.queue.RunBatch(ctx, j.Batch, e.lockedHandler(j, claimStart))
		for _, res := range results {
			e.report(j, res)
		}
		// A full batch means there is probably more: fetch again at once.
		more = len(results) == j.Batch
	default:
		var leases []*acquire.Lease
		leases, err = j.queue.Claim(ctx, 1)
		if err == nil && len(leases) > 0 {
			e.report(j, e.runLease(ctx, j, leases[0], claimStart))
			more = !e.tookLast(j, leases[0].Slot)
		}
	}
	if err == nil || ctx.Err() != nil {
		return more
	}
	e.opts.Logger.Warn("almanac: worker error; retrying", j.logArgs("error", err, "retry_in", e.errorPause())...)
	select {
	case <-ctx.Done():
	case <-e.opts.Clock.After(e.errorPause()):
	}
	return true
}

// along returns the jobs that go with j, just picked, in one transaction:
// for a batched locked-mode job, up to Batch-1 other batched jobs with work
// whose transactions would be alike (NewestFirst, DeadMan and MaxWork),
// taken from the run queue in its order. Each of them counts a worker of
// its own (its Concurrency holds) and the transaction one of
// Options.Concurrency. None for other modes: one slot per transaction is
// what a locked-mode job without Batch asks for. Called with e.mu held.
func (e *engine) along(j *job) []*job {
	if j.mode != modeBatch || j.solo {
		return nil
	}
	return e.ready.popAlong(j, j.Batch-1, func(c *job) bool {
		return c.mode == modeBatch && !c.solo && c.NewestFirst == j.NewestFirst && c.DeadMan == j.DeadMan && c.MaxWork == j.MaxWork
	})
}

// unitAcross does one unit of work for the jobs of group, batched jobs of
// different series: the first acquirable slot of each series, all in one
// transaction (acquire.RunAcross). It reports for each job whether more
// may be waiting, as unit does. A job given nothing whose series may hold
// slots a batch across series leaves to RunBatch (a cap, an expired
// lease) runs its next unit alone; one given nothing else has no more
// (a wake-up that named it after its slot was done, for instance).
func (e *engine) unitAcross(ctx context.Context, group []*job) []bool {
	claimStart := time.Now()
	queues := make([]*acquire.Queue, len(group))
	handlers := make([]acquire.Handler, len(group))
	for i, j := range group {
		queues[i], handlers[i] = j.queue, e.lockedHandler(j, claimStart)
	}
	results, err := acquire.RunAcross(ctx, queues, handlers)
	more := make([]bool, len(group))
	for i, j := range group {
		var rs []acquire.Result
		if i < len(results) {
			rs = results[i]
		}
		for _, res := range rs {
			e.report(j, res)
		}
		switch {
		case len(rs) > 0:
			more[i] = !e.tookLast(j, rs[0].Slot)
		case err == nil && rs != nil:
			e.mu.Lock()
			j.solo = true
			e.mu.Unlock()
			more[i] = true
		}
	}
	if err == nil || ctx.Err() != nil {
		return more
	}
	e.opts.Logger.Warn("almanac: worker error; retrying", "jobs", len(group), "error", err, "retry_in", e.errorPause())
	select {
	case <-ctx.Done():
	case <-e.opts.Clock.After(e.errorPause()):
	}
	for i := range more {
		more[i] = true
	}
	return more
}

// tookLast reports whether an oldest-first job just took the last slot it
// has materialized: no later slot is due, and no earlier one was
// acquirable when this one was claimed, so the job need not look again
// until something wakes it (a notification, a retry's timer, the poll). At
// a boundary where each of many series has one slot due, that spares each
// job a claim that would find nothing.
func (e *engine) tookLast(j *job, sl acquire.Slot) bool {
	if j.NewestFirst {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return !j.covered.IsZero() && !sl.End.Before(j.covered)
}

// errorPause is how long a worker waits after an error before it looks for
// work again.
func (e *engine) errorPause() time.Duration { return min(time.Second, e.opts.PollInterval) }

// outcomeRetryLimit bounds how long a lease-mode worker keeps trying to
// record an outcome while the database is unreachable (a failover, a
// restart): a second run of the slot is the price of giving up.
const outcomeRetryLimit = 5 * time.Minute

// afterStop is how long an outcome write may go on once the scheduler
// stops waiting for its workers (the shutdown timeout passed).
const afterStop = 5 * time.Second

// runLease runs the lease handler under a heartbeat and records its
// outcome, unless the handler recorded one itself. The outcome write is
// repeated across lost connections (it is guarded by owner and fence, so
// repeating it is safe) until it is recorded, the lease is found lost, or
// outcomeRetryLimit passes: an outcome that could not be written while the
// database failed over must not make the slot run a second time. Other
// workers leave an expired lease to its holder for a grace period
// (Policy.TakeoverGrace), and the holder retries eagerly.
func (e *engine) runLease(ctx context.Context, j *job, l *acquire.Lease, claimStart time.Time) acquire.Result {
	stop := j.queue.KeepAlive(ctx, []*acquire.Lease{l})
	defer stop()
	hctx, cancel := l.Context(redact.WithPasswords(ctx, e.passwords))
	defer cancel()
	hctx, span := e.claimed(hctx, j, l.Slot, claimStart, true)
	start := time.Now()
	err := callLeaseHandler(hctx, j.LeaseHandler, l)
	endSpan(span, err)
	res := acquire.Result{Slot: l.Slot, Duration: time.Since(start), Err: err}
	// Record the outcome even if the shutdown timeout cancelled ctx, but
	// not for long after the scheduler stopped waiting for its workers.
	rctx, rcancel := context.WithTimeout(retry.Eager(context.WithoutCancel(ctx)), outcomeRetryLimit)
	defer rcancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(afterStop, rcancel) })()
	var werr error
	switch {
	case errors.Is(context.Cause(hctx), acquire.ErrLeaseLost):
		res.Outcome, res.Err = acquire.Abandoned, context.Cause(hctx)
		e.opts.Logger.Warn("almanac: lease lost; the handler was stopped", j.slotArgs(l.Slot, "error", res.Err)...)
		// A holder that gave its lease up because it could not renew it
		// hands the slot back if the database is reachable again, so that
		// another worker need not wait for the lease to expire. Guarded by
		// the fence: a lease really lost is left alone.
		gctx, gcancel := context.WithTimeout(rctx, 5*time.Second)
		_ = l.Release(gctx)
		gcancel()
		return res
	case err != nil && !isSkipOrSnooze(err) && ctx.Err() != nil:
		// Shutdown cut the handler short: give the slot back with its
		// checkpoint, not counted as a failure.
		res.Outcome, res.Err = acquire.Abandoned, context.Cause(ctx)
		werr = l.Release(rctx)
	default:
		res.Outcome, res.Delay, werr = l.Finish(rctx, err)
		if err == nil && (res.Outcome == acquire.Failed || res.Outcome == acquire.Parked) {
			res.Err = errCompleteTxNotCommitted
		}
	}
	if werr != nil {
		if res.Outcome != acquire.Abandoned {
			res.Outcome, res.Err = acquire.Abandoned, fmt.Errorf("recording the outcome failed: %w (the slot runs again once its lease expires)", werr)
		}
		e.opts.Logger.Error("almanac: recording the outcome failed", j.slotArgs(l.Slot, "error", werr)...)
	}
	return res
}

// errCompleteTxNotCommitted is the failure of a lease handler that returned
// nil after Lease.CompleteTx in a transaction that did not commit: the only
// way a nil return is recorded as a failure (Lease.Finish).
var errCompleteTxNotCommitted = errors.New("the handler returned nil, but the transaction it called CompleteTx in did not commit")

func callLeaseHandler(ctx context.Context, h LeaseHandler, l *acquire.Lease) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicError(p)
		}
	}()
	return h(ctx, l)
}

// report records one slot outcome (log, metrics) and passes it to
// onResult.
func (e *engine) report(j *job, res acquire.Result) {
	e.record(j, res)
	if e.onResult != nil {
		e.onResult(j, res)
	}
	// A retry or snooze due before the next poll: look again when it is.
	if (res.Outcome == acquire.Failed || res.Outcome == acquire.Snoozed) && res.Delay < e.opts.PollInterval {
		go func() {
			<-e.opts.Clock.After(res.Delay)
			e.wake(j)
		}()
	}
}

// poll scans for jobs with work at the start, every PollInterval, and when
// asked (requestScan): the fallback for a missed notification, for slots
// whose retry backoff ran out, and for expired leases.
func (e *engine) poll(ctx context.Context) {
	for {
		if err := e.scan(ctx); err != nil && ctx.Err() == nil {
			e.opts.Logger.Warn("almanac: looking for work failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.opts.Clock.After(e.opts.PollInterval):
		case <-e.rescan:
		}
	}
}
