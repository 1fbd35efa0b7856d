//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/internal/demo/pgcluster"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/longtest"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// The shape of a round.
const (
	seriesName = "chaos_report"
	interval   = "PT1M"
	// skipEvery: the workers skip the slots whose grid index is a multiple
	// of it (about 25 of the range), so SKIP outcomes are part of the run.
	skipEvery = 97
	// failRate is the share of handler runs that fail after writing their
	// effect, which must then be rolled back.
	failRate = 0.03

	// Short timeouts so that recovery fits in a CI run.
	deadMan  = 2 * time.Second
	leaseTTL = 2 * time.Second
	// freeze is how long a stopped worker stays frozen: past its lease and
	// past the locked-mode dead-man timeout.
	freeze = max(deadMan, leaseTTL) + 1500*time.Millisecond

	// drainBound is how long after the last fault every slot must be done.
	drainBound = 60 * time.Second
	// stallBound and phaseBound fail a round whose progress stops, or never
	// reaches the last fault, rather than letting it hang.
	stallBound = 90 * time.Second
	phaseBound = 4 * time.Minute
	// stopBound is how long a worker may take to exit after SIGTERM.
	stopBound = 30 * time.Second

	hostileRole = "chaos_hostile"
)

// slots is the size of the range: 2,400 with ALMANAC_LONG_TESTS, else
// 1,200. The faults are planned as shares of it, so a shorter range gets the
// same faults, closer together.
var slots = longtest.Pick(1200, 2400)

// rangeFrom is the first slot of the range; the range is [rangeFrom,
// rangeTo).
var (
	rangeFrom = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rangeTo   = rangeFrom.Add(time.Duration(slots) * time.Minute)
)

// fleetPlan is the mix of workers: every mode, and every mode also as the
// hostile role. Handlers of the batched workers are shorter, as the short
// tasks that mode is for. A locked-mode handler spends half its time idle
// in the slot's transaction and half in a statement, so the hostile
// workers' handlers (225 ms and more of each) outlast the role's
// idle-in-transaction (200 ms) and statement (150 ms) timeouts every time:
// if almanac did not override them, those workers would complete nothing.
var fleetPlan = []fleetWorker{
	{"locked", false, 100 * time.Millisecond, 500 * time.Millisecond},
	{"locked", true, 450 * time.Millisecond, 650 * time.Millisecond},
	{"locked", false, 100 * time.Millisecond, 500 * time.Millisecond},
	{"batch", false, 20 * time.Millisecond, 150 * time.Millisecond},
	{"batch", true, 450 * time.Millisecond, 650 * time.Millisecond},
	{"batch", false, 20 * time.Millisecond, 150 * time.Millisecond},
	{"lease", false, 100 * time.Millisecond, 500 * time.Millisecond},
	{"lease", true, 100 * time.Millisecond, 500 * time.Millisecond},
	{"lease", false, 100 * time.Millisecond, 500 * time.Millisecond},
	{"lease", false, 100 * time.Millisecond, 500 * time.Millisecond},
}

// fleetWorker is a worker of a round's fleet: its mode, whether it connects
// as the hostile role, and how long its handlers run.
type fleetWorker struct {
	mode             string
	hostile          bool
	workMin, workMax time.Duration
}

// firstPart is the share of the range the workers materialize as they
// start; the rest comes with the materialize fault.
const firstPart = 0.6

// scenario is the shape of a round: its series (one grid each, all of the
// same interval), the range every series covers, and its fleet.
type scenario struct {
	series []slot.Series
	byName map[string]slot.Series
	// from and to bound the range of every series: [from, to).
	from, to time.Time
	fleet    []fleetWorker
	// engine: the workers run the root package's engine over every series
	// (the worker's -series-count), which registers the series and
	// materializes their range itself; else they work the one series with
	// acquire, and the suite registers it and materializes its range.
	engine bool
	// deps: the one series depends on upstreamName, which the suite
	// registers done and re-opens under faults (TestChaosDependencies).
	deps bool
}

func newScenario(t *testing.T, names []string, from, to time.Time, fleet []fleetWorker, engine bool) *scenario {
	sc := &scenario{byName: map[string]slot.Series{}, from: from, to: to, fleet: fleet, engine: engine}
	for _, name := range names {
		grid, err := slot.NewSeries(name, mustInterval(interval), time.UTC, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		sc.series = append(sc.series, grid)
		sc.byName[name] = grid
	}
	return sc
}

// slots is how many slots the round's range holds, over every series.
func (sc *scenario) slots() int {
	return len(sc.series) * int(sc.to.Sub(sc.from)/mustInterval(interval).Clock())
}

// designatedSkip reports whether the workers skip the slot of series name
// with grid index i: when i plus the number ending the name (0 for none)
// is a multiple of skipEvery, the worker's rule (worker.skip), so that the
// series of a many-series round, which share one grid, do not all skip the
// same starts.
func designatedSkip(name string, i int64) bool {
	n, err := strconv.ParseInt(name[strings.LastIndexByte(name, '_')+1:], 10, 64)
	if err != nil {
		n = 0
	}
	return (i+n)%skipEvery == 0
}

// TestChaos works one series with acquire's claim loops in every mode.
func TestChaos(t *testing.T) {
	chaos(t, func(t *testing.T) *scenario {
		return newScenario(t, []string{seriesName}, rangeFrom, rangeTo, fleetPlan, false)
	})
}

// chaos runs rounds of the scenario sc returns: one, or back to back for
// ALMANAC_CHAOS_SOAK, on the suite's cluster.
func chaos(t *testing.T, sc func(*testing.T) *scenario) {
	seed, soak := settings(t)
	env := suiteEnv(t)
	began := time.Now()
	for n := 0; ; n++ {
		s := seed + int64(n)
		ok := t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			r := &round{t: t, sc: sc(t), seed: s, cluster: env.cluster, admin: env.admin, bin: env.bin,
				schema: fmt.Sprintf("chaos_%d", rounds.Add(1)), rng: rand.New(rand.NewPCG(uint64(s), 0))}
			r.run()
		})
		if !ok || time.Since(began) >= soak {
			return
		}
	}
}

// settings reads the seed and the soak duration from the environment.
func settings(t *testing.T) (seed int64, soak time.Duration) {
	seed = time.Now().UnixNano() % 1_000_000_000
	if v := os.Getenv("ALMANAC_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("ALMANAC_CHAOS_SEED=%q: expected an integer", v)
		}
	}
	if v := os.Getenv("ALMANAC_CHAOS_SOAK"); v != "" {
		var err error
		if soak, err = time.ParseDuration(v); err != nil || soak < 0 {
			t.Fatalf("ALMANAC_CHAOS_SOAK=%q: expected a duration such as 30m", v)
		}
	}
	t.Logf("chaos seed %d (replay with ALMANAC_CHAOS_SEED=%d)", seed, seed)
	return seed, soak
}

// env is what the suite's tests share, set up by the first that needs it
// and torn down by TestMain: the suite's own server, which it may restart
// and crash without disturbing other tests, with the hostile role; the
// suite's pool on it; and the worker program.
type env struct {
	cluster *pgcluster.Cluster
	admin   *pgxpool.Pool
	bin     string
}

var (
	shared     *env
	sharedErr  error
	sharedOnce sync.Once
	// rounds numbers the test binary's rounds: each works in a schema of
	// its own on the shared server.
	rounds atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.admin.Close()
		if err := shared.cluster.Destroy(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: destroy the cluster:", err)
			code = max(code, 1)
		}
		_ = os.RemoveAll(filepath.Dir(shared.bin))
	}
	os.Exit(code)
}

// suiteEnv returns the shared environment, setting it up on first use.
func suiteEnv(t *testing.T) *env {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = newEnv() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func newEnv() (*env, error) {
	bin, err := buildWorker()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		// Durable on purpose, unlike pgcluster.FastSettings: the immediate
		// restart is a crash, and every commit a worker saw acknowledged
		// must survive its recovery.
		"fsync":              "on",
		"synchronous_commit": "on",
		"full_page_writes":   "on",
		// Ten workers with two pools each, and the suite's connections.
		"max_connections": "200",
	}})
	if err != nil {
		_ = os.RemoveAll(filepath.Dir(bin))
		return nil, err
	}
	e := &env{cluster: c, bin: bin}
	if e.admin, err = pgxpool.New(ctx, c.URL("postgres")); err == nil {
		_, err = e.admin.Exec(ctx, `CREATE ROLE `+hostileRole+` LOGIN;
		-- Role defaults that break code that assumes the server's: almanac
		-- must override each of them where it matters.
		ALTER ROLE `+hostileRole+` SET statement_timeout = '150ms';
		ALTER ROLE `+hostileRole+` SET lock_timeout = '50ms';
		ALTER ROLE `+hostileRole+` SET idle_in_transaction_session_timeout = '200ms';
		ALTER ROLE `+hostileRole+` SET default_transaction_isolation = 'serializable'`)
	}
	if err != nil {
		if e.admin != nil {
			e.admin.Close()
		}
		_ = c.Destroy()
		_ = os.RemoveAll(filepath.Dir(bin))
		return nil, err
	}
	return e, nil
}

// round is one run of the scenario, in its own schema.
type round struct {
	t       *testing.T
	sc      *scenario
	seed    int64
	rng     *rand.Rand // only used while planning, on the test goroutine
	cluster *pgcluster.Cluster
	admin   *pgxpool.Pool
	bin     string
	schema  string
	specs   []*workerSpec
	fleet   *fleet
	faults  faultLog

	// restart is held exclusively by server restarts and shared by the
	// suite's own writes (materialize, re-open, eject, terminate), so that
	// their outcome is always known.
	restart sync.RWMutex
	// reopened counts the COMPLETE slots the re-open faults made
	// AVAILABLE: each must be done once more.
	reopened atomic.Int64
	// upstreamReopened counts the upstream slots the upstream faults
	// re-opened (and did again).
	upstreamReopened atomic.Int64
}

func (r *round) run() {
	t := r.t
	began := time.Now()
	r.setup()
	r.fleet = newFleet(t, r.bin, r.seed)
	r.specs = r.workers()
	for i, w := range r.specs {
		if err := r.fleet.start(w); err != nil {
			t.Fatalf("seed %d: worker %d: %v", r.seed, i, err)
		}
	}

	plan := r.plan()
	faultsEnd, err := r.inject(plan)
	if err != nil {
		t.Fatalf("seed %d: %v\n%s\nworker output:\n%s", r.seed, err, r.describeFaults(), r.fleet.output())
	}
	drain, err := r.drain(faultsEnd)
	if err != nil {
		t.Fatalf("seed %d: %v\n%s\nworker output:\n%s", r.seed, err, r.describeFaults(), r.fleet.output())
	}
	problems := append(r.fleet.unexpected(), r.fleet.shutdown(stopBound)...)
	for _, f := range r.faults.all() {
		if f.err != nil {
			problems = append(problems, fmt.Sprintf("fault %s at %s failed: %v", f.kind, f.began.Format(time.StampMilli), f.err))
		}
	}

	rep := r.check()
	rep.drain, rep.total = drain, time.Since(began)
	t.Log(r.summary(rep))
	if len(problems) > 0 || len(rep.violations) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "seed %d: %d violation(s), %d problem(s) (replay with ALMANAC_CHAOS_SEED=%d)\n",
			r.seed, len(rep.violations), len(problems), r.seed)
		for _, p := range problems {
			fmt.Fprintf(&b, "problem: %s\n", p)
		}
		b.WriteString(rep.describe(r, 20)) // the faults are in the summary above
		fmt.Fprintf(&b, "worker output:\n%s", r.fleet.output())
		t.Error(b.String())
	}
}

// setup migrates the round's schema, registers the series unless the
// workers' engines do (and its upstream series, if it has one), and adds
// the instruments: the ledger and effect tables the workers write, and a
// trigger that records every change of a slot's status, fence, owner or
// generation with the id of the transaction that made it (but the upstream
// series').
func (r *round) setup() {
	t := r.t
	ctx := context.Background()
	if _, err := migrations.Up(ctx, r.admin, r.schema); err != nil {
		t.Fatal(err)
	}
	if !r.sc.engine {
		if _, _, err := seriesdb.Add(ctx, r.admin, r.schema, r.sc.series[0]); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.admin.Exec(ctx, sqlschema.Render(`
-- One row per attempt (acquisition), keyed by its fencing token, written by
-- the worker over its own autocommit pool: it outlives the slot's
-- transaction. started and ended are on the database clock.
CREATE TABLE {{schema}}.chaos_ledger (
    fence       bigint PRIMARY KEY,
    name        text NOT NULL,
    slot_start  timestamptz NOT NULL,
    worker      text NOT NULL,
    pid         integer NOT NULL,
    mode        text NOT NULL,
    owner       uuid,        -- lease mode: the holder's owner id
    lease_until timestamptz, -- lease mode: the latest deadline the holder saw committed
    started     timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended       timestamptz, -- NULL: the process died holding it
    outcome     text,
    detail      text
);
-- The effect: one row per slot per generation, written in the slot's
-- transaction. No unique key, so duplicates are counted, not prevented.
CREATE TABLE {{schema}}.chaos_effect (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL,
    slot_start timestamptz NOT NULL,
    fence      bigint NOT NULL,
    xid        bigint NOT NULL DEFAULT txid_current(),
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- What the engine did to each slot, committed with it or not at all.
CREATE TABLE {{schema}}.chaos_history (
    id              bigserial PRIMARY KEY,
    name            text NOT NULL,
    slot_start      timestamptz NOT NULL,
    xid             bigint NOT NULL DEFAULT txid_current(),
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    old_status      text NOT NULL,
    new_status      text NOT NULL,
    old_fence       bigint NOT NULL,
    new_fence       bigint NOT NULL,
    old_owner       uuid,
    new_owner       uuid,
    old_lease_until timestamptz,
    old_generation  bigint NOT NULL,
    new_generation  bigint NOT NULL
);
CREATE FUNCTION {{schema}}.chaos_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.chaos_history
        (name, slot_start, old_status, new_status, old_fence, new_fence, old_owner, new_owner, old_lease_until,
         old_generation, new_generation)
    VALUES (NEW.name, NEW.slot_start, OLD.status, NEW.status, OLD.fence, NEW.fence, OLD.owner, NEW.owner, OLD.lease_until,
        OLD.generation, NEW.generation);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_record AFTER UPDATE ON {{schema}}.slot FOR EACH ROW
    WHEN (NEW.name <> '`+upstreamName+`' AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.fence IS DISTINCT FROM NEW.fence
        OR OLD.owner IS DISTINCT FROM NEW.owner OR OLD.generation IS DISTINCT FROM NEW.generation))
    EXECUTE FUNCTION {{schema}}.chaos_record();
GRANT USAGE ON SCHEMA {{schema}} TO `+hostileRole+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {{schema}} TO `+hostileRole+`;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {{schema}} TO `+hostileRole+`;`, r.schema))
	if err != nil {
		t.Fatal(err)
	}
	if r.sc.deps {
		r.addUpstream(ctx)
	}
}

// hostileURL is the URL of the role with hostile settings.
func (r *round) hostileURL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", hostileRole, r.cluster.Port())
}

// workers returns the fleet's specs. In a one-series round each worker
// materializes an overlapping piece of the first part of the range as it
// starts, so the pieces are inserted by several processes at once; in a
// many-series round each runs the engine over every series.
func (r *round) workers() []*workerSpec {
	first := int(firstPart * float64(r.sc.slots()))
	step := first / len(r.sc.fleet)
	var specs []*workerSpec
	for i, w := range r.sc.fleet {
		name := fmt.Sprintf("w%02d-%s", i+1, w.mode)
		db := r.cluster.URL("postgres")
		if w.hostile {
			name += "-hostile"
			db = r.hostileURL()
		}
		args := []string{
			"-db", db, "-ledger-db", r.cluster.URL("postgres"),
			"-schema", r.schema, "-interval", interval, "-name", name, "-mode", w.mode,
			"-from", r.sc.from.Format(time.RFC3339), "-to", r.sc.to.Format(time.RFC3339),
			"-work-min", w.workMin.String(), "-work-max", w.workMax.String(),
			"-dead-man", deadMan.String(), "-lease-ttl", leaseTTL.String(),
			"-fail-rate", fmt.Sprint(failRate), "-skip-every", fmt.Sprint(skipEvery),
		}
		if r.sc.engine {
			args = append(args, "-series", seriesPrefix, "-series-count", fmt.Sprint(len(r.sc.series)),
				"-concurrency", fmt.Sprint(engineConcurrency))
		} else {
			lo := max(0, i*step-r.rng.IntN(step))
			hi := min(first, (i+1)*step+r.rng.IntN(step))
			if i == len(r.sc.fleet)-1 {
				hi = first
			}
			args = append(args, "-series", seriesName,
				"-materialize", minute(lo).Format(time.RFC3339)+"/"+minute(hi).Format(time.RFC3339))
		}
		specs = append(specs, &workerSpec{name: name, mode: w.mode, args: args})
	}
	return specs
}

// minute returns the start of slot i of the range.
func minute(i int) time.Time { return rangeFrom.Add(time.Duration(i) * time.Minute) }

// counts returns how many slots exist and how many are done (COMPLETE or
// SKIP): the round's schema holds only its series, and the upstream
// series of a dependencies round, which the suite works.
func (r *round) counts(ctx context.Context) (total, done int, err error) {
	err = r.admin.QueryRow(ctx, sqlschema.Render(`SELECT count(*), count(*) FILTER (WHERE status IN ('COMPLETE', 'SKIP'))
		FROM {{schema}}.slot WHERE name <> '`+upstreamName+`'`, r.schema)).Scan(&total, &done)
	return total, done, err
}

// drain waits until every slot of the range is done, at most drainBound
// after the last fault ended, and returns how long that took.
func (r *round) drain(faultsEnd time.Time) (time.Duration, error) {
	var total, done int
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		total, done, err = r.counts(ctx)
		cancel()
		if err == nil && total == r.sc.slots() && done == r.sc.slots() {
			return time.Since(faultsEnd), nil
		}
		if time.Since(faultsEnd) > drainBound {
			return 0, fmt.Errorf("%d of %d slots done %s after the last fault (%d exist; last error: %v); bound %s\n%s",
				done, r.sc.slots(), time.Since(faultsEnd).Round(time.Millisecond), total, err, drainBound, r.openSlots())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// openSlots describes the slots not done, for a drain failure.
func (r *round) openSlots() string {
	rows, err := r.admin.Query(context.Background(), sqlschema.Render(`SELECT name, slot_start, status, fence, attempts, fail_count,
		coalesce(message, ''), owner::text, lease_until, not_before
		FROM {{schema}}.slot WHERE status NOT IN ('COMPLETE', 'SKIP') ORDER BY slot_start, name LIMIT 20`, r.schema))
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	var start time.Time
	var name, status, message string
	var fence int64
	var attempts, failures int
	var owner *string
	var until, notBefore *time.Time
	_, err = pgx.ForEachRow(rows, []any{&name, &start, &status, &fence, &attempts, &failures, &message, &owner, &until, &notBefore}, func() error {
		fmt.Fprintf(&b, "open slot %s %s: %s fence %d attempts %d failures %d owner %v lease_until %v not_before %v message %q\n",
			name, start.UTC().Format(time.RFC3339), status, fence, attempts, failures, deref(owner), deref(until), deref(notBefore), message)
		return nil
	})
	if err != nil {
		return err.Error()
	}
	return b.String()
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
