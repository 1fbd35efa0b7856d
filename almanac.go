package almanac

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/scheduler"
	"github.com/almanacdev/almanac/slot"
)

// Series is the grid of one series: a name, an ISO-8601 interval, a time
// zone and an origin (see package slot). Obtain one from Client.Series.
type Series = slot.Series

// Slot is what a handler sees of the slot it holds: its bounds and text
// form (Key for idempotency keys), the fencing token, the attempt number,
// whether it took over from an expired holder, and the checkpoint of earlier
// attempts.
type Slot = acquire.Slot

// Lease is a slot held in lease mode; see acquire.Lease.
type Lease = acquire.Lease

// Handler does the work of one slot in locked mode. Everything it writes
// through tx commits atomically with the slot's COMPLETE: return nil to
// complete, Skip(reason) to skip, Snooze(d) to look again later, or an error
// to have its writes rolled back and the failure retried with backoff.
type Handler = acquire.Handler

// LeaseHandler does the work of one slot in lease mode. Return nil to
// complete it (or complete it yourself with Lease.CompleteTx inside your
// own transaction, to commit your writes with the completion), Skip, Snooze
// or an error.
type LeaseHandler = scheduler.LeaseHandler

// Skip returns the error a handler returns to mark its slot SKIP.
func Skip(reason string) error { return acquire.Skip(reason) }

// Snooze returns the error a handler returns to be called again for the same
// slot after d, without counting a failure.
func Snooze(d time.Duration) *acquire.SnoozeError { return acquire.Snooze(d) }

// Outcome is how a slot's run ended; Summary counts them.
type Outcome = acquire.Outcome

// The outcomes of a slot's run.
const (
	Completed = acquire.Completed // COMPLETE, with the handler's writes
	Skipped   = acquire.Skipped   // SKIP
	Snoozed   = acquire.Snoozed   // AVAILABLE again after the snooze, not a failure
	Failed    = acquire.Failed    // AVAILABLE again after the retry delay
	Parked    = acquire.Parked    // gave up: stays visible until re-opened or retried
	Abandoned = acquire.Abandoned // nothing recorded (shutdown, lost connection); acquirable again
)

// Summary counts the outcomes of Drain.
type Summary = scheduler.Summary

// Errors callers can test with errors.Is.
var (
	// ErrInvalid: malformed input (interval, time, zone, name, reason,
	// range).
	ErrInvalid = slot.ErrInvalid
	// ErrNotMigrated: the schema lacks migrations; run Client.Migrate.
	ErrNotMigrated = migrations.ErrNotMigrated
	// ErrUnknownSeries: the series is not registered.
	ErrUnknownSeries = seriesdb.ErrNotFound
	// ErrSeriesConflict: the series is registered with another zone or
	// origin, which would move every slot boundary.
	ErrSeriesConflict = seriesdb.ErrConflict
	// ErrLeaseLost: a lease-mode write found the slot no longer held by
	// this worker with this fencing token; nothing was changed.
	ErrLeaseLost = acquire.ErrLeaseLost
	// ErrUnavailable: the database stayed unreachable, or kept dropping
	// connections, for the whole retry budget (Options.RetryBudget).
	ErrUnavailable = retry.ErrUnavailable
	// ErrIncomplete: Drain returned with slots of its scope unfinished;
	// errors.As finds a *scheduler.IncompleteError with the counts.
	ErrIncomplete = scheduler.ErrIncomplete
)

// DefaultRetryBudget is the default of Options.RetryBudget.
const DefaultRetryBudget = time.Minute

// Options configure a Client. The zero value is usable.
type Options struct {
	// Schema holding almanac's tables. Default "almanac".
	Schema string
	// Logger receives one line per slot outcome and warnings. Default:
	// silent.
	Logger *slog.Logger
	// Concurrency caps the workers of all jobs together. Default 10. In
	// locked mode each running worker holds one connection of the pool;
	// keep Concurrency below the pool's MaxConns minus 2.
	Concurrency int
	// PollInterval, ShutdownTimeout and Clock: see scheduler.Options.
	PollInterval    time.Duration
	ShutdownTimeout time.Duration
	Clock           scheduler.Clock
	// Pooler says whether the pool's connections go through a pooler such
	// as PgBouncer. Default PoolerAuto: a pool that goes through one and
	// prepares named statements (pgx's default, which fails at random
	// through transaction pooling) is refused with ErrPooler at the first
	// call; PoolerSession accepts it. NewPool configures a pool that works
	// through either.
	Pooler Pooler
	// ListenURL is a direct connection to the server (not through a
	// pooler in transaction mode, where LISTEN cannot work) on which
	// started jobs listen for wake-ups. Default: the pool's connection
	// settings; a listener that cannot receive says so once in the log and
	// idle workers poll every PollInterval.
	ListenURL string
	// RetryBudget bounds how long a call keeps retrying transient faults
	// (a lost connection, a restarting or full server, a failover) before
	// it returns an error wrapping ErrUnavailable; the caller's context
	// bounds it too. Default DefaultRetryBudget. Start, Stop and the
	// running workers are not bound by it: Start retries until its
	// context ends, and workers for as long as they run.
	RetryBudget time.Duration
}

// Client is the entry point: it migrates the schema, registers series and
// jobs, runs the jobs' workers, and answers coverage questions (gaps,
// status) and backfills (materialize, re-open, skip, retry). It works on
// the caller's pool; give the pool room for the workers
// (acquire.ConfigurePool adds TCP keepalives and cancellation that keeps
// connections, recommended for locked mode).
type Client struct {
	pool   *pgxpool.Pool
	opts   Options
	listen *pgx.ConnConfig
	jobs   []scheduler.Job
	sched  *scheduler.Scheduler

	checked sync.Mutex // guards poolOK
	poolOK  bool       // the pool passed checkPool
}

// New returns a Client working on pool.
func New(pool *pgxpool.Pool, opts Options) (*Client, error) {
	if opts.Schema == "" {
		opts.Schema = sqlschema.Default
	}
	if err := sqlschema.Check(opts.Schema); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RetryBudget <= 0 {
		opts.RetryBudget = DefaultRetryBudget
	}
	c := &Client{pool: pool, opts: opts}
	if opts.ListenURL != "" {
		cfg, err := pgx.ParseConfig(opts.ListenURL)
		if err != nil {
			// The URL may hold a password: it is not repeated.
			return nil, fmt.Errorf("%w: Options.ListenURL is malformed; expected e.g. postgres://user@host:5432/dbname", ErrInvalid)
		}
		c.listen = cfg
	}
	return c, nil
}

// call returns the context of one call: ctx with the client's retry budget
// unless ctx carries one already, and connection retries logged.
func (c *Client) call(ctx context.Context) context.Context {
	if !retry.HasBudget(ctx) {
		ctx = retry.WithBudget(ctx, c.opts.RetryBudget)
	}
	return c.logRetries(ctx)
}

// logRetries makes the retries of transient faults under ctx visible in the
// log.
func (c *Client) logRetries(ctx context.Context) context.Context {
	return retry.OnRetry(ctx, func(err error, attempt int, wait time.Duration) {
		c.opts.Logger.Warn("almanac: database fault; retrying", "error", err, "attempt", attempt, "retry_in", wait)
	})
}

// Migrate creates or upgrades almanac's tables in the schema. It is safe to
// run from every instance at start-up, concurrently, and when the schema is
// current it only reads the version table, so a role that cannot change the
// schema may run it (see migrations.Grants for the two roles).
//
// Like every call of the Client, it retries transient faults within
// Options.RetryBudget.
func (c *Client) Migrate(ctx context.Context) error {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return err
	}
	_, err := migrations.Up(ctx, c.pool, c.opts.Schema)
	return err
}

// SeriesOptions place a series' grid. The zero value is UTC with the
// default origin.
type SeriesOptions struct {
	// TimeZone is an IANA zone name; calendar parts (days, months) are
	// added in it. Default "UTC".
	TimeZone string
	// Origin is the start of slot 0. Default 2000-01-01T00:00 local (Monday
	// 2000-01-03 for weekly intervals).
	Origin time.Time
}

// Series registers the series (name, interval) with the grid opts describe
// and returns it; a series registered already with the same grid is simply
// returned. name must pass slot.CheckName (no control or invisible
// characters, at most 200 bytes); interval is an ISO-8601 duration of at
// most P1000Y: PT5M, PT1H, P1D, P1W, P1M. Errors wrap ErrInvalid for
// malformed input, found before anything is written, and ErrSeriesConflict
// for a series registered with another zone or origin.
func (c *Client) Series(ctx context.Context, name, interval string, opts SeriesOptions) (Series, error) {
	if err := slot.CheckName(name); err != nil {
		return Series{}, err
	}
	iv, err := slot.ParseInterval(interval)
	if err != nil {
		return Series{}, err
	}
	loc, err := slot.LoadZone(opts.TimeZone)
	if err != nil {
		return Series{}, err
	}
	grid, err := slot.NewSeries(name, iv, loc, opts.Origin)
	if err != nil {
		return Series{}, err
	}
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return Series{}, err
	}
	def, _, err := seriesdb.Add(ctx, c.pool, c.opts.Schema, grid)
	if err != nil {
		return Series{}, err
	}
	return def.Grid, nil
}

// Job is a series, a handler and a trigger. See scheduler.Job for every
// field; the common ones:
//
//   - Series, and Handler (locked mode, the default) or LeaseHandler with
//     Mode scheduler.Lease;
//   - Lag: how long after its end a slot becomes due;
//   - Schedule: a cron spec, when slots should be materialized on a
//     schedule rather than as soon as they are due;
//   - CatchUp: what to do with slots missed during downtime;
//   - Concurrency and Priority among jobs.
type Job = scheduler.Job

// Register adds a job; call it before Start or Drain.
func (c *Client) Register(j Job) error {
	if c.sched != nil {
		return errors.New("almanac: Register after Start")
	}
	c.jobs = append(c.jobs, j)
	return nil
}

func (c *Client) scheduler() (*scheduler.Scheduler, error) {
	s := scheduler.New(c.pool, scheduler.Options{
		Schema: c.opts.Schema, Concurrency: c.opts.Concurrency, Logger: c.opts.Logger,
		PollInterval: c.opts.PollInterval, ShutdownTimeout: c.opts.ShutdownTimeout, Clock: c.opts.Clock,
		Listen: c.listen,
	})
	for _, j := range c.jobs {
		if err := s.Add(j); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start runs the registered jobs in the background: due slots are
// materialized and worked until Stop. Every instance of a program may run
// the same jobs; each slot is done once.
//
// Start registers the jobs' series first, retrying transient faults until
// it succeeds or ctx ends (not within Options.RetryBudget: a service that
// starts while its database restarts should wait, not fail); it returns at
// once on other errors, such as a series registered with another grid or a
// schema that is not migrated.
func (c *Client) Start(ctx context.Context) error {
	if c.sched != nil {
		return errors.New("almanac: Start called twice")
	}
	ctx = c.logRetries(ctx)
	if err := c.checkPool(ctx); err != nil {
		return err
	}
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	c.sched = s
	return nil
}

// Stop stops acquiring, lets running handlers finish within
// Options.ShutdownTimeout, then cancels them: locked-mode work rolls back,
// lease-mode work is released with its checkpoint. It returns when the
// workers are done, or when ctx is done first.
func (c *Client) Stop(ctx context.Context) error {
	if c.sched == nil {
		return errors.New("almanac: Stop without Start")
	}
	return c.sched.Stop(ctx)
}

// Drain is a batch run, for cron-driven programs and tests: it materializes
// what is due and works the registered jobs' slots until every one of them
// is finished or has been given its chance, and returns the outcomes by
// kind. It keeps going through faults (lost connections, a restarting
// server) and waits for slots other workers hold; it stops waiting for
// slots that failed (they wait for their retry) or are parked.
//
// It returns nil only when every slot in scope (see scheduler.RunOnce) is
// COMPLETE or SKIP; otherwise an error wrapping ErrIncomplete that says how
// many are left and why, also when ctx ends first.
func (c *Client) Drain(ctx context.Context) (Summary, error) {
	ctx = c.logRetries(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	s, err := c.scheduler()
	if err != nil {
		return nil, err
	}
	return s.RunOnce(ctx)
}

// coverage returns the coverage client of a series.
func (c *Client) coverage(ctx context.Context, s Series) (*coverage.Client, error) {
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	return coverage.New(ctx, c.pool, s, coverage.Options{Schema: c.opts.Schema})
}

// Gap is a maximal run of missing slots.
type Gap = coverage.Gap

// Gaps returns the missing slots of [from, to) as maximal runs, in order.
func (c *Client) Gaps(ctx context.Context, s Series, from, to time.Time) ([]Gap, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return nil, err
	}
	var out []Gap
	for g, err := range cov.Gaps(ctx, from, to) {
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// Status summarizes [from, to): slots by state, missing ones, share
// finished, oldest open slot, last completion.
func (c *Client) Status(ctx context.Context, s Series, from, to time.Time) (coverage.Status, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return coverage.Status{}, err
	}
	return cov.Status(ctx, from, to)
}

// Materialize inserts the missing slots of [from, to) as AVAILABLE.
func (c *Client) Materialize(ctx context.Context, s Series, from, to time.Time) (coverage.MaterializeResult, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return coverage.MaterializeResult{}, err
	}
	return cov.Materialize(ctx, from, to, coverage.MaterializeOptions{})
}

// Reopen makes the COMPLETE and SKIP slots of [from, to) AVAILABLE again
// (a backfill: late data arrived), with reason as their message, and wakes
// idle workers. Slots being worked on are left alone and listed in the
// result. A reason that fails slot.CheckReason (invalid UTF-8, control or
// invisible characters, more than 1 KiB) is an error wrapping ErrInvalid,
// returned before anything is read or written.
func (c *Client) Reopen(ctx context.Context, s Series, from, to time.Time, reason string) (coverage.ReopenResult, error) {
	if err := slot.CheckReason(reason); err != nil {
		return coverage.ReopenResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return coverage.ReopenResult{}, err
	}
	return cov.Reopen(ctx, from, to, coverage.ReopenOptions{Reason: reason})
}

// SkipRange marks the slots of [from, to) SKIP with reason (nothing to do
// for them), creating missing ones as SKIP; finished and held slots are
// left alone. reason is checked like Reopen's.
func (c *Client) SkipRange(ctx context.Context, s Series, from, to time.Time, reason string) (coverage.SkipResult, error) {
	if err := slot.CheckReason(reason); err != nil {
		return coverage.SkipResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return coverage.SkipResult{}, err
	}
	return cov.Skip(ctx, from, to, coverage.SkipOptions{Reason: reason})
}

// Retry makes the slots of [from, to) that wait for a retry, or gave up,
// acquirable now.
func (c *Client) Retry(ctx context.Context, s Series, from, to time.Time) (coverage.RetryResult, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return coverage.RetryResult{}, err
	}
	return cov.Retry(ctx, from, to, coverage.RetryOptions{})
}

// History returns the history of the slot of s that contains t: its row as
// it is now and its recorded events, oldest first: who held it, what
// failed, who re-opened it and why. See coverage.Client.History.
func (c *Client) History(ctx context.Context, s Series, t time.Time) (coverage.History, error) {
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return coverage.History{}, err
	}
	return cov.History(ctx, t)
}

// PruneHistory deletes the history events older than the schema's
// retention (90 days unless changed in the settings table) and returns how
// many it deleted. Running jobs do it every sweep interval; see
// coverage.PruneHistory.
func (c *Client) PruneHistory(ctx context.Context) (int64, error) {
	return coverage.PruneHistory(ctx, c.pool, coverage.PruneOptions{Schema: c.opts.Schema})
}
