package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/almanacdev/almanac/acquire"
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

// Summary counts the outcomes of RunOnce.
type Summary map[acquire.Outcome]int

// Failed reports whether any slot failed or was parked.
func (s Summary) Failed() bool { return s[acquire.Failed]+s[acquire.Parked] > 0 }

// RunOnce materializes what is due and works every acquirable slot of the
// jobs, then returns what happened: the sidecar's --once. Slots in backoff
// after a failure are not waited for. If ctx is done first, it shuts down as
// Run does.
func (s *Scheduler) RunOnce(ctx context.Context) (Summary, error) {
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	summary := Summary{}
	onResult := s.opts.OnResult
	s.opts.OnResult = func(r Result) {
		mu.Lock()
		summary[r.Outcome]++
		mu.Unlock()
		if onResult != nil {
			onResult(r)
		}
	}
	for _, j := range s.jobs {
		if err := s.materialize(ctx, j, j.start); err != nil {
			return nil, err
		}
	}
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	s.startCompleters()
	defer s.stopCompleters()
	var workers sync.WaitGroup
	s.dispatch(ctx, work, &workers, true)
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-s.opts.Clock.After(s.opts.ShutdownTimeout):
		stopWork()
		<-finished
	}
	return summary, ctx.Err()
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
func (s *Scheduler) unit(ctx context.Context, j *job) bool {
	switch j.Mode {
	case Locked:
		res, ok, err := j.queue.Run(ctx, j.Handler)
		if err != nil {
			s.opts.Logger.Warn("almanac: acquisition failed", j.logArgs("error", err)...)
		}
		if ok {
			s.report(j, res)
		}
		return ok && err == nil
	case LockedBatch:
		results, err := j.queue.RunBatch(ctx, j.Batch, j.Handler)
		if err != nil {
			s.opts.Logger.Warn("almanac: acquisition failed", j.logArgs("error", err)...)
		}
		for _, res := range results {
			s.report(j, res)
		}
		// A full batch means there is probably more: fetch again at once.
		return len(results) == j.Batch && err == nil
	default:
		leases, err := j.queue.Claim(ctx, 1)
		if err != nil {
			s.opts.Logger.Warn("almanac: claim failed", j.logArgs("error", err)...)
			return false
		}
		if len(leases) == 0 {
			return false
		}
		s.report(j, s.runLease(ctx, j, leases[0]))
		return true
	}
}

// runLease runs the lease handler under a heartbeat and records its
// outcome, unless the handler recorded one itself.
func (s *Scheduler) runLease(ctx context.Context, j *job, l *acquire.Lease) acquire.Result {
	stop := j.queue.KeepAlive(ctx, []*acquire.Lease{l})
	defer stop()
	hctx, cancel := l.Context(ctx)
	defer cancel()
	start := time.Now()
	err := callLeaseHandler(hctx, j.LeaseHandler, l)
	res := acquire.Result{Slot: l.Slot, Duration: time.Since(start), Err: err}
	// Record the outcome even if the shutdown timeout cancelled ctx.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	var skip *acquire.SkipError
	var snooze *acquire.SnoozeError
	var werr error
	switch {
	case errors.Is(context.Cause(hctx), acquire.ErrLeaseLost):
		res.Outcome, res.Err = acquire.Abandoned, acquire.ErrLeaseLost
		return res
	case err == nil:
		res.Outcome = acquire.Completed
		if !l.Finished() {
			werr = j.completer.Complete(rctx, l)
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
			res.Outcome, res.Err = acquire.Abandoned, werr
		}
		s.opts.Logger.Warn("almanac: recording the outcome failed", j.logArgs("slot", l.Slot.Slot.String(), "error", werr)...)
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

// report logs one slot outcome and passes it to OnResult.
func (s *Scheduler) report(j *job, res acquire.Result) {
	args := j.logArgs("slot", res.Slot.Slot.String(), "attempt", res.Slot.Attempt,
		"duration", res.Duration.Round(time.Microsecond), "outcome", string(res.Outcome))
	if res.Err != nil && res.Outcome != acquire.Completed {
		args = append(args, "error", res.Err.Error())
	}
	if res.Outcome == acquire.Failed || res.Outcome == acquire.Parked {
		s.opts.Logger.Warn("almanac: slot", args...)
	} else {
		s.opts.Logger.Info("almanac: slot", args...)
	}
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
// look-back window every SweepInterval.
func (s *Scheduler) drive(ctx context.Context, j *job) {
	if err := s.materialize(ctx, j, j.start); err != nil && ctx.Err() == nil {
		s.opts.Logger.Error("almanac: materialize failed", j.logArgs("error", err)...)
	}
	lastSweep := s.opts.Clock.Now()
	for {
		now := s.opts.Clock.Now()
		next, err := j.trigger.next(now)
		if err != nil {
			s.opts.Logger.Error("almanac: trigger stopped", j.logArgs("error", err)...)
			return
		}
		wait := next.Sub(now)
		if sweep := lastSweep.Add(s.opts.SweepInterval).Sub(now); sweep < wait {
			wait = max(sweep, 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(wait):
		}
		now = s.opts.Clock.Now()
		from := now.Add(-j.LookBack)
		if now.Sub(lastSweep) < s.opts.SweepInterval {
			// A trigger: materialize from where this process last got to.
			s.mu.Lock()
			if j.covered.After(from) {
				from = j.covered
			}
			s.mu.Unlock()
		} else {
			lastSweep = now
		}
		if err := s.materialize(ctx, j, from); err != nil && ctx.Err() == nil {
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
