package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/retry"
)

// Run registers the jobs' series, materializes what is due (applying the
// catch-up policies), and works the jobs until ctx is done: triggers
// materialize newly due slots, idle workers wait for a notification
// (materialize, re-open, retry) or the poll interval, and a periodic sweep
// re-materializes each job's look-back window and prunes the slots' history
// older than the schema's retention.
//
// When ctx is done Run stops acquiring, lets running handlers finish for up
// to ShutdownTimeout, then cancels their contexts: locked-mode work rolls
// back, lease-mode work is released with its checkpoint, and no slot is
// lost either way. It then returns nil. It returns an error only when it
// cannot start (a series registered with another grid, an unreachable
// database).
func (s *Scheduler) Run(ctx context.Context) error {
	if err := s.prepare(ctx); err != nil {
		return err
	}
	s.run(ctx)
	return nil
}

// Start prepares the jobs like Run and runs them in the background until
// Stop. It returns the errors Run returns when it cannot start.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := s.prepare(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	s.stop = func(ctx context.Context) error {
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
		s.run(runCtx)
	}()
	return nil
}

// Stop shuts a started scheduler down as Run does when its context ends,
// and returns when it has (or when ctx is done first).
func (s *Scheduler) Stop(ctx context.Context) error {
	if s.stop == nil {
		return errors.New("scheduler: Stop without Start")
	}
	return s.stop(ctx)
}

// run works the prepared jobs until ctx is done, then shuts down.
func (s *Scheduler) run(ctx context.Context) {
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	s.startCompleters()
	defer s.stopCompleters()

	var background sync.WaitGroup
	background.Add(1)
	go func() {
		defer background.Done()
		s.listen(ctx)
	}()
	for _, j := range s.jobs {
		background.Add(1)
		go func() {
			defer background.Done()
			s.drive(ctx, j)
		}()
	}
	background.Add(1)
	go func() {
		defer background.Done()
		s.poll(ctx)
	}()
	background.Add(1)
	go func() {
		defer background.Done()
		s.pruneHistory(ctx)
	}()

	stopObserving := s.observeWorkers()
	defer stopObserving()
	defer s.logStopped(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	s.dispatch(ctx, work, &workers, false)

	// Shutdown: no new work; running handlers get ShutdownTimeout.
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-s.opts.Clock.After(s.opts.ShutdownTimeout):
		s.opts.Logger.Warn("almanac: shutdown timeout: cancelling running handlers", "timeout", s.opts.ShutdownTimeout)
		stopWork()
		<-finished
	}
	background.Wait()
}

func (s *Scheduler) startCompleters() {
	for _, j := range s.jobs {
		if j.Mode == Lease {
			j.completer = j.queue.NewCompleter(0, 0)
		}
	}
}

func (s *Scheduler) stopCompleters() {
	for _, j := range s.jobs {
		if j.completer != nil {
			j.completer.Close()
		}
	}
}

// dispatch hands free workers to jobs with work until ctx is done, or, with
// once, until no job has work and no worker runs.
func (s *Scheduler) dispatch(ctx, work context.Context, workers *sync.WaitGroup, once bool) {
	for {
		s.mu.Lock()
		for j := s.pick(); j != nil; j = s.pick() {
			j.running++
			s.running++
			seen := j.wakes
			workers.Add(1)
			go func() {
				defer workers.Done()
				more := s.unit(work, j)
				s.mu.Lock()
				j.running--
				s.running--
				// A wake-up that came while the unit looked may be for a
				// slot it did not see: keep looking then.
				if !more && j.wakes == seen {
					j.hasWork = false
				}
				s.mu.Unlock()
				s.pokeDispatcher()
			}()
		}
		idle := s.running == 0 && s.pick() == nil
		s.mu.Unlock()
		if once && idle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.poke:
		}
	}
}

// unit does one unit of work for j and reports whether more may be waiting:
// a slot in locked mode, a batch in LockedBatch mode, a lease in Lease mode.
// An error (the database unreachable past the retries inside, an outcome
// that could not be recorded) is logged and answered with a pause, then
// more=true: a fault is never taken for the end of the work.
func (s *Scheduler) unit(ctx context.Context, j *job) bool {
	var err error
	more := false
	claimStart := time.Now()
	switch j.Mode {
	case Locked:
		var res acquire.Result
		var ok bool
		res, ok, err = j.queue.Run(ctx, s.lockedHandler(j, claimStart))
		if ok {
			s.report(j, res)
		}
		more = ok
	case LockedBatch:
		var results []acquire.Result
		results, err = j.queue.RunBatch(ctx, j.Batch, s.lockedHandler(j, claimStart))
		for _, res := range results {
			s.report(j, res)
		}
		// A full batch means there is probably more: fetch again at once.
		more = len(results) == j.Batch
	default:
		var leases []*acquire.Lease
		leases, err = j.queue.Claim(ctx, 1)
		if err == nil && len(leases) > 0 {
			s.report(j, s.runLease(ctx, j, leases[0], claimStart))
			more = true
		}
	}
	if err == nil || ctx.Err() != nil {
		return more
	}
	s.opts.Logger.Warn("almanac: worker error; retrying", j.logArgs("error", err, "retry_in", s.errorPause())...)
	select {
	case <-ctx.Done():
	case <-s.opts.Clock.After(s.errorPause()):
	}
	return true
}

// errorPause is how long a worker waits after an error before it looks for
// work again.
func (s *Scheduler) errorPause() time.Duration { return min(time.Second, s.opts.PollInterval) }

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
// (acquire.Options.TakeoverGrace), and the holder retries eagerly.
func (s *Scheduler) runLease(ctx context.Context, j *job, l *acquire.Lease, claimStart time.Time) acquire.Result {
	stop := j.queue.KeepAlive(ctx, []*acquire.Lease{l})
	defer stop()
	hctx, cancel := l.Context(withConnPasswords(ctx, s.passwords))
	defer cancel()
	hctx, span := s.claimed(hctx, j, l.Slot, claimStart, true)
	start := time.Now()
	err := callLeaseHandler(hctx, j.LeaseHandler, l)
	endSpan(span, err)
	res := acquire.Result{Slot: l.Slot, Duration: time.Since(start), Err: err}
	// Record the outcome even if the shutdown timeout cancelled ctx, but
	// not for long after the scheduler stopped waiting for its workers.
	rctx, rcancel := context.WithTimeout(retry.Eager(context.WithoutCancel(ctx)), outcomeRetryLimit)
	defer rcancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(afterStop, rcancel) })()
	var skip *acquire.SkipError
	var snooze *acquire.SnoozeError
	var werr error
	switch {
	case errors.Is(context.Cause(hctx), acquire.ErrLeaseLost):
		res.Outcome, res.Err = acquire.Abandoned, context.Cause(hctx)
		s.opts.Logger.Warn("almanac: lease lost; the handler was stopped", j.slotArgs(l.Slot, "error", res.Err)...)
		// A holder that gave its lease up because it could not renew it
		// hands the slot back if the database is reachable again, so that
		// another worker need not wait for the lease to expire. Guarded by
		// the fence: a lease really lost is left alone.
		gctx, gcancel := context.WithTimeout(rctx, 5*time.Second)
		_ = l.Release(gctx)
		gcancel()
		return res
	case err == nil:
		res.Outcome = acquire.Completed
		for !l.Finished() {
			// The completer gives up on a batch after a while; the lease's
			// own deadline for recording is rctx's.
			werr = j.completer.Complete(rctx, l)
			if werr == nil || !retry.Transient(rctx, werr) {
				break
			}
		}
	case errors.As(err, &skip):
		res.Outcome = acquire.Skipped
		werr = l.Skip(rctx, skip.Reason)
	case errors.As(err, &snooze):
		res.Outcome, res.Delay = acquire.Snoozed, snooze.After
		werr = l.Snooze(rctx, snooze.After, snooze.Data)
	case ctx.Err() != nil:
		// Shutdown cut the handler short: give the slot back with its
		// checkpoint, not counted as a failure.
		res.Outcome, res.Err = acquire.Abandoned, context.Cause(ctx)
		werr = l.Release(rctx)
	default:
		res.Outcome, res.Delay, werr = l.Fail(rctx, err)
	}
	if werr != nil {
		if res.Outcome != acquire.Abandoned {
			res.Outcome, res.Err = acquire.Abandoned, fmt.Errorf("recording the outcome failed: %w (the slot runs again once its lease expires)", werr)
		}
		s.opts.Logger.Error("almanac: recording the outcome failed", j.slotArgs(l.Slot, "error", werr)...)
	}
	return res
}

func callLeaseHandler(ctx context.Context, h LeaseHandler, l *acquire.Lease) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicError(p)
		}
	}()
	return h(ctx, l)
}

// report records one slot outcome (log, metrics) and passes it to
// OnResult.
func (s *Scheduler) report(j *job, res acquire.Result) {
	s.record(j, res)
	if s.opts.OnResult != nil {
		s.opts.OnResult(Result{Job: j.Job, Result: res})
	}
	// A retry or snooze due before the next poll: look again when it is.
	if (res.Outcome == acquire.Failed || res.Outcome == acquire.Snoozed) && res.Delay < s.opts.PollInterval {
		go func() {
			<-s.opts.Clock.After(res.Delay)
			s.wake(j)
		}()
	}
}

// drive runs a job's trigger and sweep until ctx is done: a catch-up over
// the whole range first, then newly due slots at every trigger, and the
// look-back window every SweepInterval. What is due, and when a trigger
// fires, is reckoned on the database clock (read at every trigger); the
// scheduler's Clock only times the waits in between, so a host whose clock
// is wrong neither runs slots early nor misses them.
func (s *Scheduler) drive(ctx context.Context, j *job) {
	if now, err := s.dbNow(ctx); err == nil {
		if err := s.materialize(ctx, j, j.start, now); err != nil && ctx.Err() == nil {
			s.opts.Logger.Error("almanac: materialize failed", j.logArgs("error", err)...)
		}
	}
	lastSweep := s.opts.Clock.Now()
	for ctx.Err() == nil {
		now, err := s.dbNow(ctx)
		if err != nil {
			continue // only when ctx is done: dbNow retries faults until then
		}
		next, err := j.trigger.next(now)
		if err != nil {
			s.opts.Logger.Error("almanac: trigger stopped", j.logArgs("error", err)...)
			return
		}
		wait := next.Sub(now)
		if sweep := lastSweep.Add(s.opts.SweepInterval).Sub(s.opts.Clock.Now()); sweep < wait {
			wait = max(sweep, 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(wait):
		}
		if now, err = s.dbNow(ctx); err != nil {
			return
		}
		from := now.Add(-j.LookBack)
		if s.opts.Clock.Now().Sub(lastSweep) < s.opts.SweepInterval {
			// A trigger: materialize from where this process last got to.
			s.mu.Lock()
			if j.covered.After(from) {
				from = j.covered
			}
			s.mu.Unlock()
		} else {
			lastSweep = s.opts.Clock.Now()
		}
		if err := s.materialize(ctx, j, from, now); err != nil && ctx.Err() == nil {
			s.opts.Logger.Error("almanac: materialize failed", j.logArgs("error", err)...)
		}
	}
}

// poll wakes every job every PollInterval: the fallback for a missed
// notification and for slots whose retry backoff ran out.
func (s *Scheduler) poll(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(s.opts.PollInterval):
			s.wakeAll()
		}
	}
}
