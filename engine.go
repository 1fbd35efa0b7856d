package almanac

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/schedule"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/telemetry"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// Defaults of Options and Job, stated on their fields.
const (
	defaultConcurrency     = 10
	defaultPollInterval    = 5 * time.Second
	defaultShutdownTimeout = 30 * time.Second
)

// sweepInterval is how often each job re-materializes its look-back window
// and the slots' history is pruned.
const sweepInterval = 10 * time.Minute

// completionWindow is how long a lease-mode worker's completion waits for
// others' to be written with them (acquire.Options.CompletionWindow).
const completionWindow = 5 * time.Millisecond

// engine runs a Client's jobs: it materializes their due slots and works
// them with a bounded, prioritized pool of workers. Any number of engines,
// in any number of processes, may run the same jobs: materializing is
// idempotent and acquisition exclusive, so no leader is elected.
type engine struct {
	pool     *pgxpool.Pool
	opts     Options         // the client's, with its defaults
	listenTo *pgx.ConnConfig // where to LISTEN; nil: the pool's configuration
	sweep    time.Duration   // sweepInterval, shorter in tests
	// onResult, if set, is told every slot outcome, from the worker's
	// goroutine (Drain counts them).
	onResult func(*job, acquire.Result)
	jobs     []*job
	byKey    map[key]*job // the jobs by series, for wake-ups
	// readyLag and readyGrace are the smallest lag and takeover grace of
	// the jobs, with which the poll's scan (wake.Ready) looks for work.
	readyLag, readyGrace time.Duration
	// rescan asks the poll loop for a scan now; buffered, one pending
	// request is enough.
	rescan chan struct{}
	tel    *telemetry.Instruments
	// passwords are those of the engine's connections, which lease
	// handlers get in their context (redact.WithPasswords): a Command's
	// EnvAll passes no variable holding one.
	passwords []string

	mu      sync.Mutex
	running int
	ready   runQueue      // the jobs with work and a free worker slot
	poke    chan struct{} // wakes the dispatcher; buffered, one pending poke is enough
	// stop, set by start, stops acquiring, lets running handlers finish
	// for up to Options.ShutdownTimeout, then cancels their contexts:
	// locked-mode work rolls back, lease-mode work is released with its
	// checkpoint, and no slot is lost either way. It returns when the
	// workers are done, or ctx's error when ctx is done first.
	stop func(context.Context) error
}

// job is a Job with its runtime state.
type job struct {
	Job
	mode    mode
	queue   *acquire.Queue
	cov     *coverage.Client
	trigger trigger
	start   time.Time // first slot covered
	// owner, intervalText and the attributes label the job's log lines and
	// measurements; set once by prepare.
	owner, intervalText, spanName string
	attrSet                       attribute.Set
	// add and record are the options of every measurement, built once:
	// a variadic call would allocate its slice per slot.
	add     []metric.AddOption
	record  []metric.RecordOption
	covered time.Time // end of what is materialized as far as this process knows
	// guarded by engine.mu
	hasWork bool
	// wakes counts wake-ups, so a worker that found nothing clears hasWork
	// only if no wake-up arrived while it looked.
	wakes   uint64
	running int
	limit   int
	// queuedAt is the running count the job is queued in e.ready at, or
	// notQueued; queuedAs numbers that queueing (0 when not queued), which
	// tells its entry from those left behind.
	queuedAt int
	queuedAs uint64
	// solo makes the job's next unit a batch of its own series: a batch
	// across series gave it nothing while it had work (see along).
	solo bool
}

// newEngine returns an engine that works on pool with the client's options,
// listening on listen (nil: the pool's configuration).
func newEngine(pool *pgxpool.Pool, opts Options, listen *pgx.ConnConfig) *engine {
	opts = opts.withDefaults()
	return &engine{pool: pool, opts: opts, listenTo: listen, sweep: sweepInterval, poke: make(chan struct{}, 1),
		rescan: make(chan struct{}, 1), byKey: map[key]*job{},
		tel: telemetry.New(opts.MeterProvider, opts.TracerProvider), passwords: connectionPasswords(pool, listen)}
}

// connectionPasswords returns the passwords pool and listen (either may be
// nil) connect with, from their URL, PGPASSWORD or a password file.
func connectionPasswords(pool *pgxpool.Pool, listen *pgx.ConnConfig) []string {
	var passwords []string
	if pool != nil {
		passwords = append(passwords, pool.Config().ConnConfig.Password)
	}
	if listen != nil {
		passwords = append(passwords, listen.Password)
	}
	return slices.DeleteFunc(passwords, func(p string) bool { return p == "" })
}

// add adds a job, before the engine starts.
func (e *engine) add(j Job) error {
	if err := j.validate(); err != nil {
		return err
	}
	if e.byKey[j.key()] != nil {
		return fmt.Errorf("scheduler: two jobs for %s %s", j.Series.Name(), j.Series.Interval())
	}
	if j.LookBack <= 0 {
		iv := j.Series.Interval()
		mean := iv.Clock() + time.Duration(iv.Days())*24*time.Hour + time.Duration(iv.Months())*730*time.Hour
		j.LookBack = max(24*time.Hour, 10*mean)
	}
	jb := &job{Job: j, mode: j.mode(), limit: e.opts.Concurrency, queuedAt: notQueued}
	if j.Concurrency > 0 {
		jb.limit = min(j.Concurrency, e.opts.Concurrency)
	}
	jb.trigger = trigger{grid: j.Series, lag: j.Lag}
	if j.Schedule != "" {
		jb.trigger.schedule, _ = schedule.Parse(j.Schedule) // validated above
	}
	grace := max(j.TakeoverGrace, 0) // 0 is acquire's default: a smaller grace only wakes early
	if len(e.jobs) == 0 || j.Lag < e.readyLag {
		e.readyLag = j.Lag
	}
	if len(e.jobs) == 0 || grace < e.readyGrace {
		e.readyGrace = grace
	}
	e.jobs = append(e.jobs, jb)
	e.byKey[jb.key()] = jb
	return nil
}

// prepare registers the jobs' series, opens their queues and coverage
// clients, and decides where each job's coverage starts, with a constant
// number of statements whatever the number of jobs: one registration of
// them all, one read of their definitions, one read of the first slots of
// those that have no From, and the database clock. Transient faults (a
// lost connection, a restarting server) are retried until ctx ends;
// anything else (a series registered with another grid, a schema not
// migrated) is returned at once.
func (e *engine) prepare(ctx context.Context) error {
	if len(e.jobs) == 0 {
		return ErrNoJobs
	}
	grids := make([]slot.Series, len(e.jobs))
	for i, j := range e.jobs {
		grids[i] = j.Series
	}
	defs, err := seriesdb.AddMany(ctx, e.pool, e.opts.Schema, grids)
	if err != nil {
		return fmt.Errorf("scheduler: register: %w", err)
	}
	// The queues and clients read the definitions just read, not each its
	// own.
	known := seriesdb.WithKnown(ctx, defs)
	for _, j := range e.jobs {
		// From and To bound what the job acquires, not only what it
		// materializes: older open slots are not its work.
		qopts := acquire.Options{Schema: e.opts.Schema, From: j.From, To: j.To, Policy: j.Policy, Logger: e.opts.Logger}
		if j.mode == modeLease {
			// Lease workers hold one lease each: their completions are
			// written together.
			qopts.CompletionWindow = completionWindow
		}
		var err error
		if j.queue, err = acquire.New(known, e.pool, j.Series, qopts); err != nil {
			return fmt.Errorf("scheduler: %s: %w", j.Series, err)
		}
		j.seriesAttrs(j.queue.Owner().String())
		if j.cov, err = coverage.New(known, e.pool, j.Series, coverage.Options{Schema: e.opts.Schema}); err != nil {
			return fmt.Errorf("scheduler: %s: %w", j.Series, err)
		}
	}
	if err := e.firstSlots(ctx); err != nil {
		return err
	}
	e.logStarted(ctx)
	return nil
}

// firstSlotsSQL returns, for each series named in $1 of interval $2, the
// start of its first stored or compacted slot (NULL for none): the
// beginning of coverage.Client.Extent, for many series in one statement.
const firstSlotsSQL = `SELECT n.name, least(
        (SELECT min(s.slot_start) FROM {{schema}}.slot AS s WHERE s.name = n.name AND s."interval" = $2),
        (SELECT min(c.range_start) FROM {{schema}}.slot_compacted AS c WHERE c.name = n.name AND c."interval" = $2))
FROM unnest($1::text[]) AS n(name)`

// firstSlots decides where each job's coverage starts: at From (the first
// slot starting at or after it), else at the series' first stored slot,
// else, for a series with none, at its most recently due slot.
func (e *engine) firstSlots(ctx context.Context) error {
	byInterval := map[string][]string{}
	for _, j := range e.jobs {
		if j.From.IsZero() {
			iv := j.Series.Interval().String()
			byInterval[iv] = append(byInterval[iv], j.Series.Name())
			continue
		}
		sl, err := j.Series.Floor(j.From)
		if err != nil {
			return fmt.Errorf("scheduler: %s start: %w", j.Series.Name(), err)
		}
		j.start = sl.Start
		if sl.Start.Before(j.From) {
			j.start = sl.End // the first slot that starts at or after Start
		}
	}
	if len(byInterval) == 0 {
		return nil
	}
	sql := sqlschema.Render(firstSlotsSQL, e.opts.Schema)
	first := map[key]time.Time{}
	for iv, names := range byInterval {
		err := retry.Do(ctx, func(ctx context.Context) error {
			rows, err := e.pool.Query(ctx, sql, names, iv)
			if err != nil {
				return err
			}
			var name string
			var at pgtype.Timestamptz
			_, err = pgx.ForEachRow(rows, []any{&name, &at}, func() error {
				if at.Valid && at.InfinityModifier == pgtype.Finite {
					first[key{name, iv}] = at.Time
				}
				return nil
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("scheduler: first slots of %d series of %s: %w", len(names), iv, err)
		}
	}
	now, err := e.dbNow(ctx)
	if err != nil {
		return err
	}
	for _, j := range e.jobs {
		if !j.From.IsZero() {
			continue
		}
		if at, ok := first[j.key()]; ok {
			j.start = at.In(j.Series.Location())
			continue
		}
		due, err := dueTo(j.Series, j.Lag, now)
		if err != nil {
			return err
		}
		last, err := j.Series.Floor(due.Add(-time.Microsecond))
		if err != nil {
			return err
		}
		j.start = last.Start
	}
	return nil
}

// dbNow reads the database clock, which decides what is due: hosts' clocks
// are allowed to be wrong. Transient faults are retried until ctx ends.
func (e *engine) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := retry.Do(ctx, func(ctx context.Context) error {
		return e.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	})
	return now, err
}

// materialize makes the due slots of [from, dueTo) exist, applying the
// job's catch-up policy to the missing ones, and wakes the job's workers if
// it wrote anything. Due means due on the database clock, at now.
func (e *engine) materialize(ctx context.Context, j *job, from, now time.Time) error {
	to, err := dueTo(j.Series, j.Lag, now)
	if err != nil {
		return err
	}
	from = maxTime(from, j.start)
	if !j.To.IsZero() && j.To.Before(to) {
		to = j.To
	}
	if !from.Before(to) {
		return nil
	}
	skipBefore, err := catchUpPlan(j.CatchUp, j.Series, from, to)
	if err != nil {
		return err
	}
	if from.Before(skipBefore) {
		res, err := j.cov.Materialize(ctx, from, skipBefore, coverage.WriteOptions{Reason: catchUpReason})
		if err != nil {
			return fmt.Errorf("scheduler: %s: catch-up: %w", j.Series.Name(), err)
		}
		if res.Inserted > 0 {
			e.tel.Skipped.Add(ctx, res.Inserted, j.add...)
			e.opts.Logger.Info("almanac: skipped missed slots", "series", j.Series.Name(), "interval", j.Series.Interval().String(),
				"slots", res.Inserted, "policy", j.CatchUp.String())
		}
	}
	res, err := j.cov.Materialize(ctx, maxTime(from, skipBefore), to, coverage.WriteOptions{})
	if err != nil {
		return fmt.Errorf("scheduler: %s: materialize: %w", j.Series.Name(), err)
	}
	e.mu.Lock()
	if to.After(j.covered) {
		j.covered = to
	}
	e.mu.Unlock()
	if res.Inserted > 0 {
		e.wake(j)
	}
	return nil
}

// wake marks j as having work and pokes the dispatcher. The work may be
// slots behind where the job's queue searches from (a re-open, a retry),
// so its next search starts at the beginning of its range.
func (e *engine) wake(j *job) { e.wakeMany([]*job{j}) }

// wakeMany wakes the jobs as wake does, all under one lock: the dispatcher
// then finds them queued together, and a batch across series (see along)
// takes as many as it can, rather than the first one alone.
func (e *engine) wakeMany(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	e.mu.Lock()
	for _, j := range jobs {
		j.hasWork = true
		j.wakes++
		e.ready.push(j)
	}
	e.mu.Unlock()
	for _, j := range jobs {
		rewind(j)
	}
	e.pokeDispatcher()
}

// wakeAll marks every job as having work: Drain's rounds, which must look
// at every job's range once more whatever a scan says.
func (e *engine) wakeAll() { e.wakeMany(e.jobs) }

// scan wakes the jobs whose series have acquirable slots, found by one
// statement over the whole schema (wake.Ready): what a missed notification,
// an expired retry backoff or snooze, or an expired lease left for the
// poll. Its cost grows with the series that have open or held slots, not
// with the jobs. Transient faults are retried until ctx ends.
func (e *engine) scan(ctx context.Context) error {
	keys, err := wake.Ready(ctx, e.pool, e.opts.Schema, e.readyLag, e.readyGrace)
	if err != nil {
		return err
	}
	var idle []*job
	e.mu.Lock()
	for _, k := range keys {
		// A job marked already is looking: the scan adds nothing, and
		// counting it as a wake-up would make a worker that took the
		// job's last slot look once more for nothing (the next scan
		// still finds what it leaves).
		if j := e.byKey[key{k.Name, k.Interval}]; j != nil && !j.hasWork {
			idle = append(idle, j)
		}
	}
	e.mu.Unlock()
	e.wakeMany(idle)
	return nil
}

// requestScan asks the poll loop for a scan now.
func (e *engine) requestScan() {
	select {
	case e.rescan <- struct{}{}:
	default:
	}
}

func rewind(j *job) {
	if j.queue != nil { // nil until prepare opened it
		j.queue.Rewind()
	}
}

func (e *engine) pokeDispatcher() {
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// pick chooses the job the next free worker goes to: among jobs with work
// and below their limit, the highest priority, then the fewest running
// workers, then the one that got work first (see runQueue). It takes the
// job out of the run queue: the caller counts the worker and queues the
// job again if it can take another. Called with e.mu held.
func (e *engine) pick() *job {
	if e.running >= e.opts.Concurrency {
		return nil
	}
	return e.ready.pop()
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
