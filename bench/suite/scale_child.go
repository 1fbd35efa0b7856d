package suite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
)

// The series-scale scenario measures a process of its own, so that its
// resident memory and CPU time are its alone: the bench binary started
// again in a hidden mode, its child. The child declares one series and one
// job per tenant (almanac) or one periodic job per tenant (River), starts
// them, says so on stdout, then answers its parent's commands on stdin
// until stdin closes, when it stops its client and exits.
//
// Commands, one a line, each answered by one JSON line:
//
//	watch <unix seconds>  record the handler runs of the slots (jobs) due then, forgetting earlier records
//	count                 how many runs are recorded, and how many ran since the start
//	runs                  the recorded runs: latency of each from its due time, and how many tenants they cover
//	gc                    collect garbage and return freed memory to the system

// ChildEnv is the environment variable that starts the bench binary as a
// scenario's child process; its value names the child.
const ChildEnv = "ALMANAC_BENCH_CHILD"

// scaleChildName is ChildEnv's value for the series-scale child.
const scaleChildName = "series-scale"

// IsChild reports whether this process was started as a scenario's child:
// the command then calls RunChild instead of its usual work.
func IsChild() bool { return os.Getenv(ChildEnv) != "" }

const (
	// scaleConcurrency is almanac's workers, its default
	// Options.Concurrency.
	scaleConcurrency = 10
	// scaleRiverWorkers is MaxWorkers of River's queue, the value of
	// River's examples. A River producer fetches at most as many jobs as it
	// has free workers, then cools down (100 ms by default): with 10
	// workers it runs about 100 jobs a second, and a boundary of 10,000
	// jobs takes minutes.
	scaleRiverWorkers = 100
	// scalePoolConns is each side's pool: room for the workers and for
	// almanac's reserve (Options.Concurrency's advice: below MaxConns − 2).
	scalePoolConns = 16
	// tenantPrefix starts every tenant's series name.
	tenantPrefix = "tenant_"
)

// scaleChildConfig is the first line the parent writes to the child.
type scaleChildConfig struct {
	// Side is "almanac" or "River".
	Side string `json:"side"`
	// URL reaches the database (a cluster of the bench's own, without a
	// password).
	URL     string `json:"url"`
	Tenants int    `json:"tenants"`
	// Interval is the almanac series' interval (ISO 8601), Period the same
	// as a duration for River's schedule.
	Interval string        `json:"interval"`
	Period   time.Duration `json:"period"`
}

// childMsg is a line the child writes: an event or a command's answer.
type childMsg struct {
	// Event is "progress", "started", "reply" or "error".
	Event string `json:"event"`
	// Registered is how many tenants are declared so far (progress).
	Registered int `json:"registered,omitempty"`
	// ConnectS, RegisterS and StartS time the start-up's steps (started):
	// opening the pool, declaring the tenants, starting the client.
	ConnectS  float64 `json:"connect_s,omitempty"`
	RegisterS float64 `json:"register_s,omitempty"`
	StartS    float64 `json:"start_s,omitempty"`
	// OffsetMS is the database clock minus the child's, in milliseconds
	// (started).
	OffsetMS float64 `json:"offset_ms,omitempty"`
	// Recorded and Total count runs (count, runs).
	Recorded int   `json:"recorded"`
	Total    int64 `json:"total"`
	// Latencies are the recorded runs' starts after their due time, in
	// seconds; Distinct is how many tenants they cover (runs).
	Latencies []float64 `json:"latencies,omitempty"`
	Distinct  int       `json:"distinct,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// RunChild runs this process as the child ChildEnv names, talking to its
// parent over stdin and stdout, and returns the exit code: 0 when stdin
// closed and the client stopped, 1 on an error (said on stdout and
// stderr), 2 for an unknown child.
func RunChild(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	if name := os.Getenv(ChildEnv); name != scaleChildName {
		fmt.Fprintf(stderr, "almanac-bench: %s=%q: unknown child; expected %s\n", ChildEnv, name, scaleChildName)
		return 2
	}
	out := &childOut{enc: json.NewEncoder(stdout)}
	in := bufio.NewScanner(stdin)
	fail := func(err error) int {
		fmt.Fprintln(stderr, "almanac-bench child:", err)
		out.send(childMsg{Event: "error", Error: err.Error()})
		return 1
	}
	if !in.Scan() {
		return fail(errors.New("no configuration on stdin"))
	}
	var cfg scaleChildConfig
	if err := json.Unmarshal(in.Bytes(), &cfg); err != nil {
		return fail(fmt.Errorf("configuration: %w", err))
	}
	c := &scaleChild{cfg: cfg, out: out,
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if err := c.start(ctx); err != nil {
		return fail(err)
	}
	for in.Scan() {
		reply, err := c.command(in.Text())
		if err != nil {
			return fail(err)
		}
		reply.Event = "reply"
		out.send(reply)
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := c.stop(stopCtx)
	c.pool.Close()
	if err != nil {
		return fail(fmt.Errorf("stop: %w", err))
	}
	return 0
}

// childOut writes the child's lines, one at a time.
type childOut struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *childOut) send(m childMsg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.enc.Encode(m) // a parent that went away kills the child anyway
}

// scaleChild is the child's state.
type scaleChild struct {
	cfg    scaleChildConfig
	out    *childOut
	logger *slog.Logger
	pool   *pgxpool.Pool
	stop   func(context.Context) error
	runs   runRecorder
	// offset is the database clock minus the process's: added to a
	// handler's start to compare it with a due time on the database clock.
	offset time.Duration
}

// start opens the pool, declares the tenants and starts the client,
// reporting progress every second, and says when it has started.
func (c *scaleChild) start(ctx context.Context) error {
	var registered atomic.Int64
	done := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				c.out.send(childMsg{Event: "progress", Registered: int(registered.Load())})
			}
		}
	})
	msg, err := c.startSide(ctx, func(n int) { registered.Store(int64(n)) })
	close(done)
	ticker.Wait()
	if err != nil {
		return err
	}
	msg.Event = "started"
	c.out.send(msg)
	return nil
}

// startSide starts the configured side and times its steps: connecting,
// declaring the tenants, starting the client.
func (c *scaleChild) startSide(ctx context.Context, progress func(int)) (childMsg, error) {
	var msg childMsg
	t := time.Now()
	var err error
	switch c.cfg.Side {
	case "almanac":
		c.pool, err = almanac.NewPool(ctx, c.cfg.URL, almanac.PoolOptions{MaxConns: scalePoolConns})
	case "River":
		var cfg *pgxpool.Config
		if cfg, err = pgxpool.ParseConfig(c.cfg.URL); err == nil {
			cfg.MaxConns = scalePoolConns
			c.pool, err = pgxpool.NewWithConfig(ctx, cfg)
		}
	default:
		return msg, fmt.Errorf("side %q: expected almanac or River", c.cfg.Side)
	}
	if err != nil {
		return msg, fmt.Errorf("connect: %w", err)
	}
	if err := c.pool.Ping(ctx); err != nil {
		return msg, fmt.Errorf("connect: %w", err)
	}
	msg.ConnectS = time.Since(t).Seconds()
	// Before any handler runs, and not timed: a program does not do this.
	if c.offset, err = clockOffset(ctx, c.pool); err != nil {
		return msg, err
	}
	msg.OffsetMS = ms(c.offset)
	t = time.Now()
	var client interface {
		Start(context.Context) error
		Stop(context.Context) error
	}
	if c.cfg.Side == "almanac" {
		client, err = c.declareAlmanac(ctx, progress)
	} else {
		client, err = c.declareRiver(progress)
	}
	if err != nil {
		return msg, fmt.Errorf("declare: %w", err)
	}
	msg.RegisterS = time.Since(t).Seconds()
	t = time.Now()
	if err := client.Start(ctx); err != nil {
		return msg, fmt.Errorf("start: %w", err)
	}
	msg.StartS = time.Since(t).Seconds()
	c.stop = client.Stop
	return msg, nil
}

// declareAlmanac declares a series and a batched locked-mode job with a
// no-op handler per tenant, in one Client.
func (c *scaleChild) declareAlmanac(ctx context.Context, progress func(int)) (*almanac.Client, error) {
	client, err := almanac.New(c.pool, almanac.Options{Logger: c.logger})
	if err != nil {
		return nil, err
	}
	handler := func(_ context.Context, _ pgx.Tx, sl almanac.Slot) error {
		c.runs.ran(tenantIndex(sl.Name), sl.End, time.Now().Add(c.offset))
		return nil
	}
	return client, registerAlmanac(ctx, client, c.cfg.Tenants, c.cfg.Interval, handler, progress)
}

// scaleBatch is the Batch of every tenant's job: batched jobs of many
// series that are due together share a transaction (a slot of each).
const scaleBatch = 100

// registerAlmanac declares one series and one job per tenant without a
// round trip per tenant: each grid is built in the process (slot.NewSeries,
// what Client.Series builds before it registers), and Start registers them
// all at once (a Job's series is registered when the client starts, if it
// is not yet).
func registerAlmanac(_ context.Context, client *almanac.Client, tenants int, interval string, h almanac.Handler, progress func(int)) error {
	iv, err := slot.ParseInterval(interval)
	if err != nil {
		return err
	}
	for i := range tenants {
		s, err := slot.NewSeries(tenantName(i), iv, time.UTC, time.Time{})
		if err != nil {
			return err
		}
		if err := client.Register(almanac.Job{Series: s, Handler: h, Batch: scaleBatch}); err != nil {
			return err
		}
		progress(i + 1)
	}
	return nil
}

// scaleTenantArgs are the arguments of a tenant's periodic River job.
type scaleTenantArgs struct {
	Tenant int `json:"tenant"`
}

// Kind is River's name for the job type.
func (scaleTenantArgs) Kind() string { return "tenant_tick" }

// boundarySchedule is a River schedule at every multiple of a period (a
// cron "every minute" for a minute), on the same boundaries as the almanac
// series' slots. (River's PeriodicInterval counts from when the leader
// starts instead.)
type boundarySchedule struct{ period time.Duration }

// Next returns the first multiple of the period after t.
func (b boundarySchedule) Next(t time.Time) time.Time { return t.Truncate(b.period).Add(b.period) }

// declareRiver declares a periodic job per tenant (RunOnStart false) with
// a no-op worker in one River client. A River job's due time is its
// scheduled time, on the process's clock, as River schedules it.
func (c *scaleChild) declareRiver(progress func(int)) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[scaleTenantArgs]) error {
		c.runs.ran(job.Args.Tenant, job.ScheduledAt, time.Now())
		return nil
	}))
	schedule := boundarySchedule{c.cfg.Period}
	jobs := make([]*river.PeriodicJob, c.cfg.Tenants)
	for i := range jobs {
		jobs[i] = river.NewPeriodicJob(schedule, func() (river.JobArgs, *river.InsertOpts) {
			return scaleTenantArgs{Tenant: i}, nil
		}, &river.PeriodicJobOpts{RunOnStart: false})
		progress(i + 1)
	}
	return river.NewClient(riverpgxv5.New(c.pool), &river.Config{
		Logger:       c.logger,
		PeriodicJobs: jobs,
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: scaleRiverWorkers}},
		Workers:      workers,
	})
}

// command answers one of the parent's commands.
func (c *scaleChild) command(line string) (childMsg, error) {
	verb, arg, _ := strings.Cut(line, " ")
	switch verb {
	case "watch":
		sec, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return childMsg{}, fmt.Errorf("watch %q: expected unix seconds", arg)
		}
		c.runs.watch(time.Unix(sec, 0))
		return childMsg{}, nil
	case "count":
		recorded, total := c.runs.count()
		return childMsg{Recorded: recorded, Total: total}, nil
	case "runs":
		return c.runs.report(), nil
	case "gc":
		debug.FreeOSMemory()
		return childMsg{}, nil
	}
	return childMsg{}, fmt.Errorf("command %q: expected watch, count, runs or gc", line)
}

// runRecorder records the handler runs of the slots due at one watched
// time: one entry per run, so that the memory it holds is that of one
// boundary's runs.
type runRecorder struct {
	mu      sync.Mutex
	due     time.Time
	tenants []int32
	starts  []int64 // unix nanoseconds, on the due time's clock
	total   int64
}

func (r *runRecorder) ran(tenant int, due, start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if due.Equal(r.due) {
		r.tenants = append(r.tenants, int32(tenant))
		r.starts = append(r.starts, start.UnixNano())
	}
}

func (r *runRecorder) watch(due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.due, r.tenants, r.starts = due, nil, nil
}

func (r *runRecorder) count() (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tenants), r.total
}

func (r *runRecorder) report() childMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := childMsg{Recorded: len(r.tenants), Total: r.total, Latencies: make([]float64, len(r.starts))}
	for i, s := range r.starts {
		m.Latencies[i] = float64(s-r.due.UnixNano()) / 1e9
	}
	tenants := slices.Clone(r.tenants)
	slices.Sort(tenants)
	m.Distinct = len(slices.Compact(tenants))
	return m
}

// tenantName is the series name of tenant i.
func tenantName(i int) string { return fmt.Sprintf("%s%06d", tenantPrefix, i) }

// tenantIndex is i for tenantName(i), -1 for another name.
func tenantIndex(name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, tenantPrefix))
	if err != nil {
		return -1
	}
	return i
}

// clockOffset returns the database clock minus this process's, from the
// quickest of a few round trips (the database read at its middle).
func clockOffset(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	best, offset := time.Duration(-1), time.Duration(0)
	for range 5 {
		var db time.Time
		t0 := time.Now()
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return 0, fmt.Errorf("clock offset: %w", err)
		}
		rtt := time.Since(t0)
		if best < 0 || rtt < best {
			best, offset = rtt, db.Sub(t0.Add(rtt/2))
		}
	}
	return offset, nil
}
