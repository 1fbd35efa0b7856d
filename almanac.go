package almanac

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/redact"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/telemetry"
)

// defaultRetryBudget is the default of Options.RetryBudget.
const defaultRetryBudget = time.Minute

// Options configure a Client. The zero value is usable.
type Options struct {
	// Schema holding almanac's tables. Default "almanac".
	Schema string
	// Logger receives structured events (docs/operations.md lists them):
	// workers starting and stopping, re-opens, skips and retries (info);
	// claims and completions (debug); failures, parkings, takeovers,
	// ejections and database faults being retried (warn); writes refused
	// because the slot is no longer the writer's (error). Attributes name
	// the series, slot, owner, attempt, generation and fence; no line holds
	// a password or a connection URL. Default: discarded, as a library
	// should not write where its program did not ask it to.
	Logger *slog.Logger
	// MeterProvider receives almanac's metrics: slot counters, handler,
	// claim and lateness histograms, and gauges of open slots, the oldest
	// open slot's age and busy workers, labelled by series (never by
	// slot). The gauges of open slots run one bounded statement per
	// collection, registered for the Client's lifetime: give a provider
	// to one long-lived Client, not to one per request. TracerProvider
	// receives a span per handler run, carried by the handler's context.
	// Default: no-op.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Concurrency caps the workers of all jobs together. Default 10. In
	// locked mode each running worker holds one connection of the pool;
	// keep Concurrency below the pool's MaxConns minus 2.
	Concurrency int
	// PollInterval is how often idle jobs look for work without being
	// woken: the fallback for missed notifications (a listener that cannot
	// receive, see ListenURL), for retries whose backoff ran out and for
	// expired leases. Each poll is one statement for all the client's
	// jobs, which wakes those whose series have acquirable slots.
	// Default 5 s.
	PollInterval time.Duration
	// ShutdownTimeout is how long running handlers may take to finish once
	// Stop is called (or Drain's context ends), before their contexts are
	// cancelled. Default 30 s.
	ShutdownTimeout time.Duration
	// Clock times the jobs' waits (triggers, polls, the shutdown timeout).
	// What is due, lease deadlines and retry backoff are decided by the
	// database clock, never by it. Default: the system clock; tests replace
	// it to check schedules without waiting.
	Clock Clock
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
	// ChunkSize bounds the slots one transaction of a coverage operation
	// writes (Materialize, Reopen, Skip, Retry, Compact), so that a backfill of
	// millions of slots holds locks for about a second at a time. Default
	// 50,000.
	ChunkSize int
	// Actor names who works through this client in the slots' history
	// (re-opens, skips, retries): a person as user@host, a service by its
	// name; at most 200 bytes, one line. Default: the database role.
	Actor string
	// RetryBudget bounds how long a call keeps retrying transient faults
	// (a lost connection, a restarting or full server, a failover) before
	// it returns an error wrapping ErrUnavailable; the caller's context
	// bounds it too. Default 1 min. Start, Stop and the
	// running workers are not bound by it: Start retries until its
	// context ends, and workers for as long as they run.
	RetryBudget time.Duration
}

// Client is the entry point: it migrates the schema, registers series and
// jobs, runs the jobs' workers, and answers coverage questions (gaps,
// status) and backfills (materialize, re-open, skip, retry). It works on
// the caller's pool; give the pool room for the workers
// (NewPool and ConfigurePool add TCP keepalives and cancellation that keeps
// connections, recommended for locked mode).
//
// A Client is safe for concurrent use. Its jobs run between Start and Stop,
// as often as wanted; Drain runs them once, while not started.
type Client struct {
	pool   *pgxpool.Pool
	opts   Options
	listen *pgx.ConnConfig

	mu      sync.Mutex
	jobs    []Job
	jobKeys map[key]bool // the series of jobs, to refuse a second job for one
	running *engine      // between Start and Stop
	covs    map[string]seriesCoverage

	tel *telemetry.Instruments

	checked sync.Mutex // guards poolOK
	poolOK  bool       // the pool passed checkPool
}

// New returns a Client working on pool.
func New(pool *pgxpool.Pool, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if err := sqlschema.Check(opts.Schema); err != nil {
		return nil, err
	}
	// Every line below passes through redaction: an error may quote a
	// connection URL.
	opts.Logger = slog.New(redact.Handler(opts.Logger.Handler()))
	if err := input.CheckActor(opts.Actor); err != nil {
		return nil, fmt.Errorf("Options.Actor: %w", err)
	}
	c := &Client{pool: pool, opts: opts, covs: map[string]seriesCoverage{},
		tel: telemetry.New(opts.MeterProvider, opts.TracerProvider)}
	if opts.MeterProvider != nil {
		if err := c.observeOpen(); err != nil {
			return nil, fmt.Errorf("almanac: Options.MeterProvider refused the gauges: %w", err)
		}
	}
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

// withDefaults returns opts with the defaults of its zero fields.
func (opts Options) withDefaults() Options {
	if opts.Schema == "" {
		opts.Schema = sqlschema.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = defaultConcurrency
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = defaultShutdownTimeout
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	if opts.RetryBudget <= 0 {
		opts.RetryBudget = defaultRetryBudget
	}
	return opts
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
		c.opts.Logger.WarnContext(ctx, "almanac: database fault; retrying", "error", err, "attempt", attempt, "retry_in", wait)
	})
}

// Register adds a job, checked at once: a job without series or without a
// handler for its mode, a negative lag or a malformed cron spec is an error
// wrapping ErrInvalid, as is a second job for the same series. It returns
// ErrStarted while the client is started.
func (c *Client) Register(j Job) error {
	if err := j.validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running != nil {
		return ErrStarted
	}
	if c.jobKeys[j.key()] {
		return fmt.Errorf("%w: a job for %s is registered already", ErrInvalid, j.Series)
	}
	if c.jobKeys == nil {
		c.jobKeys = map[key]bool{}
	}
	c.jobKeys[j.key()] = true
	c.jobs = append(c.jobs, j)
	return nil
}

// engine builds an engine for the registered jobs. Called with c.mu held.
func (c *Client) engine() (*engine, error) {
	if len(c.jobs) == 0 {
		return nil, ErrNoJobs
	}
	e := newEngine(c.pool, c.opts, c.listen)
	for _, j := range c.jobs {
		if err := e.add(j); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Start runs the registered jobs in the background: due slots are
// materialized and worked until Stop. Every instance of a program may run
// the same jobs; each slot is done once. A stopped client may be started
// again.
//
// Start registers the jobs' series first, retrying transient faults until
// it succeeds or ctx ends (not within Options.RetryBudget: a service that
// starts while its database restarts should wait, not fail); it returns at
// once on other errors, such as a series registered with another grid or a
// schema that is not migrated. It returns ErrStarted if the client is
// started, ErrNoJobs without a job.
func (c *Client) Start(ctx context.Context) error {
	ctx = c.logRetries(ctx)
	if err := c.checkPool(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running != nil {
		return ErrStarted
	}
	e, err := c.engine()
	if err != nil {
		return err
	}
	if err := e.start(ctx); err != nil {
		return err
	}
	c.running = e
	return nil
}

// Stop stops acquiring, lets running handlers finish within
// Options.ShutdownTimeout, then cancels them: locked-mode work rolls back,
// lease-mode work is released with its checkpoint. It returns when the
// workers are done, or ctx's error when ctx is done first (the workers then
// finish in the background, and the client counts as stopped). It returns
// ErrNotStarted if the client is not started.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	e := c.running
	c.running = nil
	c.mu.Unlock()
	if e == nil {
		return ErrNotStarted
	}
	return e.stop(ctx)
}

// Drain is a batch run, for cron-driven programs and tests: it materializes
// what is due and works the registered jobs' slots until every one of them
// is finished or has been given its chance, and returns the outcomes by
// kind. It keeps going through faults (lost connections, a restarting
// server) and waits for slots other workers hold; it retries failures due
// within a few seconds and stops waiting for slots in a longer backoff or
// parked.
//
// It returns nil only when every slot in scope is COMPLETE or SKIP (the
// scope of a job: its slots from Job.From, else the earliest stored one,
// to the last one due, or Job.To); otherwise an error wrapping
// ErrIncomplete that says how many are left and why (an *IncompleteError),
// also when ctx ends first. It returns ErrStarted while the client is
// started (its running jobs would compete with the drain's).
func (c *Client) Drain(ctx context.Context) (Summary, error) {
	ctx = c.logRetries(ctx)
	if err := c.checkPool(ctx); err != nil {
		return Summary{}, err
	}
	c.mu.Lock()
	if c.running != nil {
		c.mu.Unlock()
		return Summary{}, ErrStarted
	}
	e, err := c.engine()
	c.mu.Unlock()
	if err != nil {
		return Summary{}, err
	}
	return e.drain(ctx)
}
