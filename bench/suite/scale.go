package suite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/almanacdev/almanac"
)

// The series-scale scenario: what idle series cost. For each count of
// tenants, one process (a child of the bench, see scale_child.go) declares
// a PT1M series and a no-op batched locked-mode job per tenant through almanac's
// root API and starts them; in the same run another process declares a
// periodic River job per tenant, on the same boundaries. Each process runs
// alone on a PostgreSQL cluster the scenario starts for itself (PostgreSQL's
// defaults), so that the server's transactions and CPU are the process's
// doing. Measured per process: start-up; at rest, in a window between two
// boundaries, the database's transactions per second and the CPU of the
// process and of every server process; resident memory; and at the
// boundary that follows, when every tenant has one slot (job) due, the time
// from due to handler start.

// scaleSizes are the series-scale scenario's sizes and timings.
type scaleSizes struct {
	// tenants are the counts measured, reference the small count memory
	// per series is measured against.
	tenants   []int
	reference int
	// interval is the series' interval; period the same as a duration,
	// River's schedule.
	interval string
	period   time.Duration
	// window is the rest window; it ends guard before a boundary.
	window, guard time.Duration
	// startLimit bounds a process's start-up; rssLimit (MiB) its memory
	// meanwhile.
	startLimit time.Duration
	rssLimit   float64
}

// boundaryLimit is how long after a boundary its runs are waited for.
func (sz scaleSizes) boundaryLimit() time.Duration { return min(time.Minute, sz.period) }

var (
	scaleFull = scaleSizes{tenants: []int{1_000, 10_000, 100_000}, reference: 10, interval: "PT1M", period: time.Minute,
		window: 25 * time.Second, guard: 3 * time.Second, startLimit: 2 * time.Minute, rssLimit: 4096}
	// scaleQuick has boundaries every 5 seconds, so that the quick run
	// waits seconds, not minutes, for them.
	scaleQuick = scaleSizes{tenants: []int{200}, reference: 10, interval: "PT5S", period: 5 * time.Second,
		window: 2 * time.Second, guard: 500 * time.Millisecond, startLimit: time.Minute, rssLimit: 4096}
)

// scaleSides are the two sides, in the order of a row's figures.
var scaleSides = []string{"almanac", "River"}

// scaleSteps is the number of processes the scenario runs.
func scaleSteps(e *env) int { return 2 * (len(e.scale().tenants) + 1) }

func (e *env) scale() scaleSizes {
	if e.opts.Quick {
		return scaleQuick
	}
	return scaleFull
}

// scaleRun is what one process measured: its start-up once, the rest
// figures once per boundary.
type scaleRun struct {
	side    string
	tenants int
	// failed says what happened to a process that did not start, or
	// stopped working; empty when it ran to the end.
	failed string
	// total is from the process's start to Start having returned; connect,
	// register and start are its steps, as the child timed them.
	total, connect, register, start float64
	// Per boundary: transactions/s and cores at rest (cores split into the
	// process's and the server's), RSS before and after a GC (MiB), and the
	// latency percentiles (s).
	tx, cores, procCores, serverCores []float64
	rss, rssGC                        []float64
	p50, p99                          []float64
	// capped is set when a percentile is the wait's limit, because fewer
	// slots than that ran within it.
	capped bool
	// due, within10 and withinLimit count the slots due at the measured
	// boundaries, and those that started within 10 s and within the limit.
	due, within10, withinLimit int
	// windowRuns counts handler runs inside the rest windows: an earlier
	// boundary's work that was not done yet.
	windowRuns int64
	// unsettled counts initial runs missing when the first cycle began.
	unsettled int64
	notes     []string
}

// scaleScenario is the state of one series-scale run.
type scaleScenario struct {
	e          *env
	sz         scaleSizes
	cl         *cluster
	admin      *pgxpool.Pool
	postmaster int
	// db is the database of the process being measured.
	db string
	// load says how busy the machine was, for the notes.
	load string
}

// runSeriesScale: for each count of tenants, almanac's process and River's
// in turn, then the rows comparing them.
func runSeriesScale(ctx context.Context, e *env) ([]Row, error) {
	sz := e.scale()
	why := procUnsupported
	if why == "" {
		if _, err := findBin(); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		var rows []Row
		for _, n := range sz.tenants {
			rows = append(rows, scaleRows(n, sz, [2]*scaleRun{}, [2]*scaleRun{})...)
		}
		for i := range rows {
			rows[i].Result, rows[i].Note = Skipped, why
		}
		return rows, nil
	}
	setupCtx := context.WithoutCancel(ctx)
	cl, err := startCluster(setupCtx, nil)
	if err != nil {
		return nil, fmt.Errorf("start a cluster: %w", err)
	}
	defer cl.stop()
	cfg, err := pgxpool.ParseConfig(cl.url())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	admin, err := pgxpool.NewWithConfig(setupCtx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	defer admin.Close()
	var backend int
	if err := admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, err
	}
	s := &scaleScenario{e: e, sz: sz, cl: cl, admin: admin}
	if s.postmaster, err = parentPID(backend); err != nil {
		return nil, fmt.Errorf("the cluster's postmaster: %w", err)
	}

	// Latencies and start-up times depend on what else the machine runs;
	// the cost at rest (CPU time, transactions, memory) much less.
	loadBefore := loadAverage()
	var refs [2]*scaleRun
	for i, side := range scaleSides {
		if refs[i], err = s.process(ctx, side, sz.reference, true); err != nil {
			return nil, err
		}
		e.advance()
	}
	var rows []Row
	for k, n := range sz.tenants {
		var runs [2]*scaleRun
		for j := range scaleSides {
			i := (j + k) % 2 // who goes first alternates
			if runs[i], err = s.process(ctx, scaleSides[i], n, false); err != nil {
				return nil, err
			}
			e.advance()
		}
		rows = append(rows, scaleRows(n, sz, runs, refs)...)
	}
	s.load = fmt.Sprintf("machine load average (1 min, %d CPUs) %s when the scenario began, %s when it ended", runtime.NumCPU(), loadBefore, loadAverage())
	rows[0].Note = joinNote(s.setup(), rows[0].Note)
	return rows, nil
}

// setup says how both sides ran, for the first row's note.
func (s *scaleScenario) setup() string {
	return fmt.Sprintf("each side a process of its own, alone on a cluster of the bench's own with PostgreSQL's defaults; "+
		"almanac: one %s series (built by slot.NewSeries) and locked-mode job (Batch %d) per tenant through Register + Start, default Options (Concurrency %d), pool of %d; "+
		"River: one periodic job per tenant at every %s boundary (RunOnStart false), MaxWorkers %d, defaults otherwise, pool of %d; "+
		"one start-up per side; at rest: %.0f s windows ending %.1f s before a boundary, a median over %d boundaries; %s",
		s.sz.interval, scaleBatch, scaleConcurrency, scalePoolConns, s.sz.interval, scaleRiverWorkers, scalePoolConns, s.sz.window.Seconds(), s.sz.guard.Seconds(), s.e.repeats, s.load)
}

// process runs one side with n tenants in a database of its own and
// measures it; reference processes are only started and weighed after a
// GC. A process that does not start, or stops working, is a run that says
// so; an error is a fault of the bench or the database, or a slot that ran
// twice.
func (s *scaleScenario) process(ctx context.Context, side string, n int, reference bool) (*scaleRun, error) {
	run := &scaleRun{side: side, tenants: n}
	db := fmt.Sprintf("scale_%s_%d", strings.ToLower(side), n)
	dbURL, err := s.createDatabase(ctx, db, side)
	s.db = db
	if err != nil {
		return nil, err
	}
	defer s.dropDatabase(db)

	began := time.Now()
	p, err := startScaleProc(ctx, scaleChildConfig{Side: side, URL: dbURL, Tenants: n, Interval: s.sz.interval, Period: s.sz.period})
	if err != nil {
		return nil, err
	}
	defer p.kill()
	started, failed, err := p.awaitStarted(ctx, n, s.sz.startLimit, s.sz.rssLimit)
	if err != nil {
		return nil, err
	}
	if failed != "" {
		run.failed = failed
		return run, nil
	}
	run.total = time.Since(began).Seconds()
	run.connect, run.register, run.start = started.ConnectS, started.RegisterS, started.StartS
	if abs := math.Abs(started.OffsetMS); abs > 100 {
		run.notes = append(run.notes, fmt.Sprintf("its clock is %.0f ms off the database's", started.OffsetMS))
	}

	err = s.measure(ctx, p, run, reference)
	if err == nil {
		if why := p.stop(30 * time.Second); why != "" {
			run.notes = append(run.notes, why)
		}
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, errChildGone):
		run.failed = "stopped working: " + err.Error()
		return run, nil
	}
	return run, err
}

// measure settles a started process, then weighs it (reference), or
// measures it at rest and at a boundary once per repeat.
func (s *scaleScenario) measure(ctx context.Context, p *scaleProc, run *scaleRun, reference bool) error {
	// almanac runs each series' most recently due slot at Start; River
	// nothing (RunOnStart false).
	var initial int64
	if run.side == "almanac" {
		initial = int64(run.tenants)
	}
	settleBy := time.Now().Add(s.sz.boundaryLimit())
	for {
		m, err := p.call(ctx, "count")
		if err != nil {
			return err
		}
		if m.Total >= initial || time.Now().After(settleBy) {
			run.unsettled = max(0, initial-m.Total)
			break
		}
		if err := sleepUntil(ctx, time.Now().Add(scalePoll)); err != nil {
			return err
		}
	}
	if reference {
		rss, err := s.weigh(ctx, p)
		run.rssGC = append(run.rssGC, rss)
		return err
	}
	for range s.e.repeats {
		if err := s.cycle(ctx, p, run); err != nil {
			return err
		}
	}
	return nil
}

// scalePoll is how often the parent asks a child how far it has got.
const scalePoll = 100 * time.Millisecond

// cycle measures one rest window and the boundary after it: the first
// boundary that leaves time for the window.
func (s *scaleScenario) cycle(ctx context.Context, p *scaleProc, run *scaleRun) error {
	lead := s.sz.guard + s.sz.window + s.sz.window/10 // the window, and time to weigh the process before it
	boundary := time.Now().Add(lead).Truncate(s.sz.period).Add(s.sz.period)
	if err := sleepUntil(ctx, boundary.Add(-lead)); err != nil {
		return err
	}
	rss, err := residentMiB(p.pid())
	if err != nil {
		return err
	}
	gc, err := s.weigh(ctx, p)
	if err != nil {
		return err
	}
	run.rss, run.rssGC = append(run.rss, rss), append(run.rssGC, gc)
	if _, err := p.call(ctx, fmt.Sprintf("watch %d", boundary.Unix())); err != nil {
		return err
	}

	// At rest: from the window's start (or now, if weighing took longer)
	// to guard before the boundary.
	if err := sleepUntil(ctx, boundary.Add(-s.sz.guard-s.sz.window)); err != nil {
		return err
	}
	r0, err := s.read(ctx, p)
	if err != nil {
		return err
	}
	if err := sleepUntil(ctx, boundary.Add(-s.sz.guard)); err != nil {
		return err
	}
	r1, err := s.read(ctx, p)
	if err != nil {
		return err
	}
	secs := r1.at.Sub(r0.at).Seconds()
	procCores, serverCores := (r1.process-r0.process)/secs, (r1.server-r0.server)/secs
	run.tx = append(run.tx, float64(r1.xacts-r0.xacts)/secs)
	run.procCores, run.serverCores = append(run.procCores, procCores), append(run.serverCores, serverCores)
	run.cores = append(run.cores, procCores+serverCores)
	run.windowRuns += r1.runs - r0.runs

	// The boundary: every tenant has one slot (job) due.
	deadline := boundary.Add(s.sz.boundaryLimit())
	for time.Now().Before(deadline) {
		m, err := p.call(ctx, "count")
		if err != nil {
			return err
		}
		if m.Recorded >= run.tenants {
			break
		}
		if err := sleepUntil(ctx, time.Now().Add(scalePoll)); err != nil {
			return err
		}
	}
	m, err := p.call(ctx, "runs")
	if err != nil {
		return err
	}
	if m.Distinct < len(m.Latencies) {
		return fmt.Errorf("%w: %s: %d runs for the %d tenants that ran at the boundary of %s",
			ErrNotExactlyOnce, run.side, len(m.Latencies), m.Distinct, boundary.Format(time.TimeOnly))
	}
	run.boundary(m.Latencies, s.sz.boundaryLimit())
	return nil
}

// boundary adds the latencies (s) of the runs of one boundary: every
// tenant's slot that did not run within limit counts as later than any
// that did.
func (run *scaleRun) boundary(latencies []float64, limit time.Duration) {
	all := make([]float64, run.tenants)
	for i := range all {
		all[i] = math.Inf(1)
	}
	copy(all, latencies)
	run.due += run.tenants
	for _, l := range latencies {
		if l <= 10 {
			run.within10++
		}
		if l <= limit.Seconds() {
			run.withinLimit++
		}
	}
	for _, pc := range []struct {
		p   float64
		out *[]float64
	}{{50, &run.p50}, {99, &run.p99}} {
		v := percentile(all, pc.p)
		if math.IsInf(v, 1) {
			v, run.capped = limit.Seconds(), true
		}
		*pc.out = append(*pc.out, v)
	}
}

// weigh asks the process to collect its garbage and return the memory it
// freed, then reads its RSS (MiB).
func (s *scaleScenario) weigh(ctx context.Context, p *scaleProc) (float64, error) {
	if _, err := p.call(ctx, "gc"); err != nil {
		return 0, err
	}
	return residentMiB(p.pid())
}

// scaleReading is one reading of the counters a rest window is the
// difference of.
type scaleReading struct {
	at time.Time
	// xacts counts the database's committed and rolled-back transactions.
	xacts int64
	// process and server are CPU seconds of the child and of the server.
	process, server float64
	// runs counts the child's handler runs.
	runs int64
}

func (s *scaleScenario) read(ctx context.Context, p *scaleProc) (scaleReading, error) {
	var r scaleReading
	m, err := p.call(ctx, "count")
	if err != nil {
		return r, err
	}
	r.runs = m.Total
	// From the postgres database: this query is not counted in the
	// process's database.
	err = s.admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, s.db).Scan(&r.xacts)
	if err != nil {
		return r, err
	}
	r.at = time.Now()
	if r.process, err = processCPU(p.pid()); err != nil {
		return r, err
	}
	r.server, err = serverCPU(s.postmaster)
	return r, err
}

// createDatabase creates a database for one process with side's tables
// and returns its URL.
func (s *scaleScenario) createDatabase(ctx context.Context, db, side string) (string, error) {
	s.dropDatabase(db)
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+quote(db)); err != nil {
		return "", fmt.Errorf("create database %s: %w", db, err)
	}
	u, err := url.Parse(s.cl.url())
	if err != nil {
		return "", err
	}
	u.Path = "/" + db
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return "", err
	}
	defer pool.Close()
	if side == "almanac" {
		c, err := almanac.New(pool, almanac.Options{})
		if err == nil {
			_, err = c.Migrate(ctx)
		}
		if err != nil {
			return "", fmt.Errorf("migrate %s: %w", db, err)
		}
	} else {
		migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		}
		if err != nil {
			return "", fmt.Errorf("migrate River in %s: %w", db, err)
		}
	}
	return u.String(), nil
}

func (s *scaleScenario) dropDatabase(db string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+quote(db)+" WITH (FORCE)")
}

// sleepUntil waits until t, or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
