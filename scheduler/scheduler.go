package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/telemetry"
)

// Defaults of Options.
const (
	DefaultConcurrency     = 10
	DefaultPollInterval    = 5 * time.Second
	DefaultSweepInterval   = 10 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
	DefaultBatch           = 100
)

// ErrNoJobs is returned by Run, Start and RunOnce without a job.
var ErrNoJobs = errors.New("scheduler: no jobs")

// CatchUpReason is the message of slots skipped by a catch-up policy.
const CatchUpReason = "catch-up policy"

// Options configure a Scheduler. The zero value is usable.
type Options struct {
	// Schema holding almanac's tables. Default "almanac".
	Schema string
	// Concurrency caps the workers of all jobs together. Default 10. In
	// locked mode each worker holds a pool connection while it works, so
	// keep it below the pool size (acquire.Options.Reserve explains).
	Concurrency int
	// PollInterval is how often idle jobs look for work without being
	// woken, the fallback for missed notifications and for retries whose
	// backoff ran out. Default 5 s.
	PollInterval time.Duration
	// SweepInterval is how often each job re-materializes its look-back
	// window, and how often the slots' history is pruned. Default 10 min.
	SweepInterval time.Duration
	// ShutdownTimeout is how long running handlers may take to finish once
	// Run's context is done, before their contexts are cancelled. Default
	// 30 s.
	ShutdownTimeout time.Duration
	// Logger receives the scheduler's events (docs/operations.md lists
	// them): workers starting and stopping at info, claims and completions
	// at debug, failures, parkings and takeovers at warn. Default: silent.
	Logger *slog.Logger
	// MeterProvider receives the slot counters and the handler, claim and
	// lateness histograms, and the busy-workers gauge; TracerProvider a
	// span per handler run, which the handler's context carries. Default:
	// no-op.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// OnResult, if set, is called after every slot outcome, from the
	// worker's goroutine.
	OnResult func(Result)
	// Clock times the scheduler's waits (triggers, polls, the shutdown
	// timeout). What is due is decided by the database clock. Default the
	// system clock.
	Clock Clock
	// Listen is where the scheduler LISTENs for wake-ups, on a connection
	// of its own. Default: the pool's configuration. Behind a pooler in
	// transaction mode LISTEN cannot work (the scheduler finds out, says so
	// once and polls); give a direct connection to the server here.
	Listen *pgx.ConnConfig
}

// Result is the outcome of one slot of one job.
type Result struct {
	Job Job
	acquire.Result
}

// Scheduler runs jobs: it materializes their due slots and works them with
// a bounded, prioritized pool of workers. Any number of schedulers, in any
// number of processes, may run the same jobs: materializing is idempotent
// and acquisition exclusive, so no leader is elected.
type Scheduler struct {
	pool *pgxpool.Pool
	opts Options
	jobs []*job
	tel  *telemetry.Instruments
	// passwords are those of the scheduler's connections, which lease
	// handlers get in their context: Command.EnvAll passes no variable
	// holding one.
	passwords []string

	mu      sync.Mutex
	running int
	poke    chan struct{}               // wakes the dispatcher; buffered, one pending poke is enough
	stop    func(context.Context) error // set by Start
}

// job is a Job with its runtime state.
type job struct {
	Job
	queue     *acquire.Queue
	cov       *coverage.Client
	completer *acquire.Completer
	trigger   trigger
	start     time.Time // first slot covered
	// owner, intervalText and the attributes label the job's log lines and
	// measurements; set once by prepare.
	owner, intervalText, spanName string
	attrSet                       attribute.Set
	// add and record are the options of every measurement, built once:
	// a variadic call would allocate its slice per slot.
	add     []metric.AddOption
	record  []metric.RecordOption
	covered time.Time // end of what is materialized as far as this process knows
	// guarded by Scheduler.mu
	hasWork bool
	// wakes counts wake-ups, so a worker that found nothing clears hasWork
	// only if no wake-up arrived while it looked.
	wakes   uint64
	running int
	limit   int
}

// New returns a scheduler that works on pool.
func New(pool *pgxpool.Pool, opts Options) *Scheduler {
	if opts.Schema == "" {
		opts.Schema = sqlschema.Default
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	return &Scheduler{pool: pool, opts: opts, poke: make(chan struct{}, 1),
		tel: telemetry.New(opts.MeterProvider, opts.TracerProvider), passwords: connectionPasswords(pool, opts.Listen)}
}

// Add adds a job. Call it before Run.
func (s *Scheduler) Add(j Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	for _, other := range s.jobs {
		if other.key() == j.key() {
			return fmt.Errorf("scheduler: two jobs for %s %s", j.Series.Name(), j.Series.Interval())
		}
	}
	if j.Batch <= 0 {
		j.Batch = DefaultBatch
	}
	// A range given on the queue bounds the job too: slots the job could
	// never acquire are not materialized or waited for.
	if j.Start.IsZero() {
		j.Start = j.Queue.From
	}
	if j.End.IsZero() {
		j.End = j.Queue.To
	}
	if j.LookBack <= 0 {
		iv := j.Series.Interval()
		mean := iv.Clock() + time.Duration(iv.Days())*24*time.Hour + time.Duration(iv.Months())*730*time.Hour
		j.LookBack = max(24*time.Hour, 10*mean)
	}
	jb := &job{Job: j, limit: s.opts.Concurrency}
	if j.Concurrency > 0 {
		jb.limit = min(j.Concurrency, s.opts.Concurrency)
	}
	jb.trigger = trigger{grid: j.Series, lag: j.Lag}
	if j.Schedule != "" {
		jb.trigger.schedule, _ = parseSchedule(j.Schedule) // validated above
	}
	s.jobs = append(s.jobs, jb)
	return nil
}

// prepare registers each job's series and opens its queue and coverage
// client. Transient faults (a lost connection, a restarting server) are
// retried until ctx ends; anything else (a series registered with another
// grid, a schema not migrated) is returned at once.
func (s *Scheduler) prepare(ctx context.Context) error {
	if len(s.jobs) == 0 {
		return ErrNoJobs
	}
	for _, j := range s.jobs {
		if _, _, err := seriesdb.Add(ctx, s.pool, s.opts.Schema, j.Series); err != nil {
			return fmt.Errorf("scheduler: register %s: %w", j.Series, err)
		}
		qopts := j.Queue
		qopts.Schema = s.opts.Schema
		qopts.Lag = j.Lag
		// Start and End bound what the job acquires, not only what it
		// materializes: older open slots are not its work.
		if qopts.From.IsZero() && !j.Start.IsZero() {
			qopts.From = j.Start
		}
		if qopts.To.IsZero() && !j.End.IsZero() {
			qopts.To = j.End
		}
		if qopts.Logger == nil {
			qopts.Logger = s.opts.Logger
		}
		var err error
		if j.queue, err = acquire.New(ctx, s.pool, j.Series, qopts); err != nil {
			return fmt.Errorf("scheduler: %s: %w", j.Series, err)
		}
		j.seriesAttrs(j.queue.Owner().String())
		if j.cov, err = coverage.New(ctx, s.pool, j.Series, coverage.Options{Schema: s.opts.Schema}); err != nil {
			return fmt.Errorf("scheduler: %s: %w", j.Series, err)
		}
		if j.start, err = s.firstSlot(ctx, j); err != nil {
			return err
		}
		j.hasWork = true
	}
	s.logStarted(ctx)
	return nil
}

// firstSlot decides where a job's coverage starts.
func (s *Scheduler) firstSlot(ctx context.Context, j *job) (time.Time, error) {
	if !j.Start.IsZero() {
		sl, err := j.Series.Floor(j.Start)
		if err != nil {
			return time.Time{}, fmt.Errorf("scheduler: %s start: %w", j.Series.Name(), err)
		}
		if sl.Start.Before(j.Start) {
			return sl.End, nil // the first slot that starts at or after Start
		}
		return sl.Start, nil
	}
	from, _, ok, err := j.cov.Extent(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("scheduler: %s: %w", j.Series.Name(), err)
	}
	if ok {
		return from, nil
	}
	now, err := s.dbNow(ctx)
	if err != nil {
		return time.Time{}, err
	}
	due, err := dueTo(j.Series, j.Lag, now)
	if err != nil {
		return time.Time{}, err
	}
	last, err := j.Series.Floor(due.Add(-time.Microsecond))
	if err != nil {
		return time.Time{}, err
	}
	return last.Start, nil
}

// dbNow reads the database clock, which decides what is due: hosts' clocks
// are allowed to be wrong. Transient faults are retried until ctx ends.
func (s *Scheduler) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := retry.Do(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	})
	return now, err
}

// materialize makes the due slots of [from, dueTo) exist, applying the
// job's catch-up policy to the missing ones, and wakes the job's workers if
// it wrote anything. Due means due on the database clock, at now.
func (s *Scheduler) materialize(ctx context.Context, j *job, from, now time.Time) error {
	to, err := dueTo(j.Series, j.Lag, now)
	if err != nil {
		return err
	}
	from = maxTime(from, j.start)
	if !j.End.IsZero() && j.End.Before(to) {
		to = j.End
	}
	if !from.Before(to) {
		return nil
	}
	skipBefore, err := catchUpPlan(j.CatchUp, j.Series, from, to)
	if err != nil {
		return err
	}
	if from.Before(skipBefore) {
		res, err := j.cov.Materialize(ctx, from, skipBefore, coverage.MaterializeOptions{SkipReason: CatchUpReason})
		if err != nil {
			return fmt.Errorf("scheduler: %s: catch-up: %w", j.Series.Name(), err)
		}
		if res.Inserted > 0 {
			s.tel.Skipped.Add(ctx, res.Inserted, j.add...)
			s.opts.Logger.Info("almanac: skipped missed slots", "series", j.Series.Name(), "interval", j.Series.Interval().String(),
				"slots", res.Inserted, "policy", j.CatchUp.String())
		}
	}
	res, err := j.cov.Materialize(ctx, maxTime(from, skipBefore), to, coverage.MaterializeOptions{})
	if err != nil {
		return fmt.Errorf("scheduler: %s: materialize: %w", j.Series.Name(), err)
	}
	s.mu.Lock()
	if to.After(j.covered) {
		j.covered = to
	}
	s.mu.Unlock()
	if res.Inserted > 0 {
		s.wake(j)
	}
	return nil
}

// wake marks j as having work and pokes the dispatcher. The work may be
// slots behind where the job's queue searches from (a re-open, a retry),
// so its next search starts at the beginning of its range.
func (s *Scheduler) wake(j *job) {
	s.mu.Lock()
	j.hasWork = true
	j.wakes++
	s.mu.Unlock()
	rewind(j)
	s.pokeDispatcher()
}

func (s *Scheduler) wakeAll() {
	s.mu.Lock()
	for _, j := range s.jobs {
		j.hasWork = true
		j.wakes++
		rewind(j)
	}
	s.mu.Unlock()
	s.pokeDispatcher()
}

func rewind(j *job) {
	if j.queue != nil { // nil until prepare opened it
		j.queue.Rewind()
	}
}

func (s *Scheduler) pokeDispatcher() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// pick chooses the job the next free worker goes to: among jobs with work
// and below their limit, the highest priority, then the fewest running
// workers, then the order of Add. Called with s.mu held.
func (s *Scheduler) pick() *job {
	if s.running >= s.opts.Concurrency {
		return nil
	}
	var best *job
	for _, j := range s.jobs {
		if !j.hasWork || j.running >= j.limit {
			continue
		}
		if best == nil || j.Priority > best.Priority || j.Priority == best.Priority && j.running < best.running {
			best = j
		}
	}
	return best
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// logArgs returns the log attributes of a job, followed by extra.
func (j *job) logArgs(extra ...any) []any {
	return append([]any{"series", j.Series.Name(), "interval", j.Series.Interval().String()}, extra...)
}
