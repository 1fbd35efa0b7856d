package almanac

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

func series(t *testing.T, name, interval string) slot.Series {
	t.Helper()
	s, err := slot.NewSeries(name, mustInterval(interval), time.UTC, time.Time{})
	require.NoError(t, err)
	return s
}

// minutesAgo returns the start of the PT1M slot that began n minutes ago:
// a job starting there has exactly n due slots.
func minutesAgo(n int) time.Time {
	return time.Now().Truncate(time.Minute).Add(-time.Duration(n) * time.Minute)
}

func count(t *testing.T, db *pgtest.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sqlschema.Render(sql, db.Schema), args...).Scan(&n))
	return n
}

// serve prepares the engine's jobs and works them until ctx is done, as
// Client.Start and Stop do.
func (e *engine) serve(ctx context.Context) error {
	if err := e.prepare(ctx); err != nil {
		return err
	}
	e.run(ctx)
	return nil
}

// result is one slot outcome of the named series' job.
type result struct {
	name string
	acquire.Result
}

// recorder collects the engine's results (engine.onResult).
type recorder struct {
	mu      sync.Mutex
	results []result
}

func (r *recorder) add(j *job, res acquire.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, result{j.Series.Name(), res})
}

// of returns the results of the named series' job.
func (r *recorder) of(name string) []result {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []result
	for _, res := range r.results {
		if res.name == name {
			out = append(out, res)
		}
	}
	return out
}

func (r *recorder) outcomes(name string) map[acquire.Outcome]int {
	out := map[acquire.Outcome]int{}
	for _, res := range r.of(name) {
		out[res.Outcome]++
	}
	return out
}

// TestPrioritiesAndLimits: a slow job with many slots and a fast job with
// few share two workers; the fast job's slots are all done while the slow
// one is still busy. The slow job's first slot is held until the fast
// job's five are done: if the fast job could not get the other worker, it
// would never be.
func TestPrioritiesAndLimits(t *testing.T) {
	db := pgtest.New(t)
	var mu sync.Mutex
	fast := 0
	fastFive := make(chan struct{})
	e := newEngine(db.Pool, Options{Schema: db.Schema, Concurrency: 2}, nil)
	require.NoError(t, e.add(Job{
		Series: series(t, "slow", "PT1M"), From: minutesAgo(20),
		Handler: func(ctx context.Context, _ pgx.Tx, _ acquire.Slot) error {
			select {
			case <-fastFive:
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("the fast job never ran while the slow one was busy")
			}
			return nil
		},
	}))
	require.NoError(t, e.add(Job{
		Series: series(t, "fast", "PT1M"), From: minutesAgo(5),
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error {
			mu.Lock()
			defer mu.Unlock()
			if fast++; fast == 5 {
				close(fastFive)
			}
			return nil
		},
	}))
	summary, err := e.drain(context.Background())
	require.NoError(t, err)
	require.Zero(t, summary.Failed, "the fast job's slots were done while the slow one held a worker")
	// 25 slots, or one more per job if a minute turned during the test.
	require.Equal(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot`), summary.Completed)
	require.GreaterOrEqual(t, summary.Completed, 25)
}

// TestPriorityFirst: with one worker, the higher-priority job's slots all
// run before the other's.
func TestPriorityFirst(t *testing.T) {
	db := pgtest.New(t)
	var mu sync.Mutex
	var order []string
	handler := func(name string) acquire.Handler {
		return func(context.Context, pgx.Tx, acquire.Slot) error {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return nil
		}
	}
	e := newEngine(db.Pool, Options{Schema: db.Schema, Concurrency: 1}, nil)
	require.NoError(t, e.add(Job{Series: series(t, "low", "PT1M"), From: minutesAgo(3), Handler: handler("low")}))
	require.NoError(t, e.add(Job{Series: series(t, "high", "PT1M"), From: minutesAgo(3), Handler: handler("high"), Priority: 1}))
	_, err := e.drain(context.Background())
	require.NoError(t, err)
	require.Len(t, order, count(t, db, `SELECT count(*) FROM {{schema}}.slot`))
	require.Equal(t, []string{"high", "high", "high"}, order[:3])
}

// TestPerJobLimit: "30 total, 15 for payouts" in small: a job limited to one
// worker never runs two handlers at once.
func TestPerJobLimit(t *testing.T) {
	db := pgtest.New(t)
	var mu sync.Mutex
	running, peak := 0, 0
	e := newEngine(db.Pool, Options{Schema: db.Schema, Concurrency: 4}, nil)
	require.NoError(t, e.add(Job{
		Series: series(t, "payouts", "PT1M"), From: minutesAgo(8), Concurrency: 1, Batch: 2,
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		},
	}))
	summary, err := e.drain(context.Background())
	require.NoError(t, err)
	require.Equal(t, count(t, db, `SELECT count(*) FROM {{schema}}.slot`), summary.Completed)
	require.Equal(t, 1, peak)
}

// TestCatchUpPolicies: a series started two hours in the past.
func TestCatchUpPolicies(t *testing.T) {
	for _, tt := range []struct {
		policy  CatchUp
		skipped int
	}{{CatchUpAll, 0}, {CatchUpLatest(3), 21}, {CatchUpNone, 23}} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			db := pgtest.New(t)
			g := series(t, "report", "PT5M")
			now := time.Now()
			start, err := g.Floor(now.Add(-2 * time.Hour))
			require.NoError(t, err)
			e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
			require.NoError(t, e.add(Job{Series: g, From: start.Start, CatchUp: tt.policy,
				Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
			summary, err := e.drain(context.Background())
			require.NoError(t, err)
			due, err := dueTo(g, 0, time.Now())
			require.NoError(t, err)
			total, err := g.Count(start.Start, due)
			require.NoError(t, err)
			require.InDelta(t, int(total)-tt.skipped, summary.Completed, 1)
			require.InDelta(t, tt.skipped, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'SKIP' AND message = $1`, catchUpReason), 1)
			require.Equal(t, int(total), count(t, db, `SELECT count(*) FROM {{schema}}.slot`), "every due slot exists: no hole is left unexplained")
		})
	}
}

// TestWakeOnReopen: an idle scheduler picks a re-opened slot up at once,
// although it would not poll for a minute.
func TestWakeOnReopen(t *testing.T) {
	db := pgtest.New(t)
	g := series(t, "report", "PT1M")
	ran := make(chan time.Time, 100)
	e := newEngine(db.Pool, Options{Schema: db.Schema, PollInterval: time.Minute}, nil)
	require.NoError(t, e.add(Job{Series: g, From: minutesAgo(3),
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error { ran <- time.Now(); return nil }}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.serve(ctx) }()
	for range 3 {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the due slots were not run")
		}
	}
	waitIdle(t, e) // so that only a wake-up can bring the re-opened slots to a worker
	cov, err := coverage.New(context.Background(), db.Pool, g, coverage.Options{Schema: db.Schema})
	require.NoError(t, err)
	from, to, ok, err := cov.Extent(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
	reopened := time.Now()
	_, err = cov.Reopen(context.Background(), from, to, coverage.WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	for range 3 {
		select {
		case at := <-ran:
			require.Less(t, at.Sub(reopened), 2*time.Second)
		case <-time.After(10 * time.Second):
			t.Fatal("the re-opened slots were not run")
		}
	}
	cancel()
	require.NoError(t, <-done)
}

// TestGracefulShutdown: a lease-mode handler cut short by the shutdown
// timeout releases its slot with its checkpoint; a locked-mode one rolls
// back. Both slots are acquirable again and nothing was recorded as failed.
func TestGracefulShutdown(t *testing.T) {
	db := pgtest.New(t)
	started := make(chan struct{}, 2)
	e := newEngine(db.Pool, Options{Schema: db.Schema, ShutdownTimeout: 300 * time.Millisecond}, nil)
	block := func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	require.NoError(t, e.add(Job{Series: series(t, "leased", "PT1M"), From: minutesAgo(1),
		LeaseHandler: func(ctx context.Context, l *acquire.Lease) error {
			if err := l.Checkpoint(ctx, "halfway"); err != nil {
				return err
			}
			return block(ctx)
		}}))
	require.NoError(t, e.add(Job{Series: series(t, "locked", "PT1M"), From: minutesAgo(1),
		Handler: func(ctx context.Context, tx pgx.Tx, _ acquire.Slot) error { return block(ctx) }}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.serve(ctx) }()
	<-started
	<-started
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the shutdown timeout")
	}
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE' AND fail_count = 0 AND owner IS NULL`))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE data = '"halfway"'`))
}

// TestLeaseOutcomes: the lease handler's return values map to outcomes.
func TestLeaseOutcomes(t *testing.T) {
	db := pgtest.New(t)
	rec := &recorder{}
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	e.onResult = rec.add
	require.NoError(t, e.add(Job{Series: series(t, "lease", "PT1M"), From: minutesAgo(5),
		To: minutesAgo(0), Policy: Policy{Retry: func(int, error) (time.Duration, bool) { return time.Hour, true }},
		LeaseHandler: func(ctx context.Context, l *acquire.Lease) error {
			switch l.Index % 5 {
			case 0:
				return nil
			case 1:
				return acquire.Skip("holiday")
			case 2:
				return acquire.Snooze(time.Hour)
			case 3:
				return errors.New("nope")
			default:
				panic("boom")
			}
		}}))
	_, err := e.drain(context.Background())
	var left *IncompleteError
	require.ErrorAs(t, err, &left, "the failed and snoozed slots wait for their retry")
	require.Equal(t, int64(3), left.Failed)
	got := rec.outcomes("lease")
	require.Equal(t, map[acquire.Outcome]int{acquire.Completed: 1, acquire.Skipped: 1, acquire.Snoozed: 1, acquire.Failed: 2}, got)
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE message LIKE 'panic: boom%'`))
}

func TestCommand(t *testing.T) {
	db := pgtest.New(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
echo "$ALMANAC_SLOT $ALMANAC_ATTEMPT $ALMANAC_FENCE" >> "$OUT"
case "$ALMANAC_SLOT_START" in
  *T00:01:00Z) exit 99 ;;
  *T00:02:00Z) echo "disk full" >&2; exit 3 ;;
esac
echo "done $ALMANAC_NAME"
`), 0o755))
	var stdout, stderr strings.Builder
	var outMu sync.Mutex
	cmd := Command{Path: script, Env: []string{"OUT=" + filepath.Join(dir, "out")}, Stdout: lockedWriter{&stdout, &outMu}, Stderr: lockedWriter{&stderr, &outMu}}
	rec := &recorder{}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	e.onResult = rec.add
	require.NoError(t, e.add(Job{Series: series(t, "cmd", "PT1M"), From: start, To: start.Add(3 * time.Minute), LeaseHandler: cmd.LeaseHandler(),
		Policy: Policy{Retry: func(int, error) (time.Duration, bool) { return time.Hour, true }}}))
	_, err := e.drain(context.Background())
	var left *IncompleteError
	require.ErrorAs(t, err, &left)
	require.Equal(t, int64(1), left.Failed, "the failed slot is reported as left")
	require.Equal(t, map[acquire.Outcome]int{acquire.Completed: 1, acquire.Skipped: 1, acquire.Failed: 1}, rec.outcomes("cmd"))
	out, err := os.ReadFile(filepath.Join(dir, "out"))
	require.NoError(t, err)
	require.Contains(t, string(out), "2026-01-01T00:00:00Z/PT1M 1 ")
	require.Contains(t, stdout.String(), "[cmd 2026-01-01T00:00:00Z/PT1M] done cmd\n")
	require.Contains(t, stderr.String(), "[cmd 2026-01-01T00:02:00Z/PT1M] disk full\n")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE' AND fail_count = 1 AND message LIKE '%exit status 3: disk full'`))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'SKIP'`))
}

// TestCommandGetsNoConnectionPassword: the engine gives its lease handlers
// the passwords of its connections (the pool's and the listener's), so a
// Command with EnvAll passes no variable holding one, whatever its name.
func TestCommandGetsNoConnectionPassword(t *testing.T) {
	db := pgtest.New(t)
	t.Setenv("DB_PASS", "conn-pw")
	t.Setenv("LISTEN_PASS", "listen-pw")
	t.Setenv("REPORT_DIR", "/srv/reports")
	// The pool connects with the password "conn-pw", the listener with
	// "listen-pw" (the test server, trusting every connection, checks
	// neither).
	withPassword := func(password string) string {
		u, err := url.Parse(db.URL)
		require.NoError(t, err)
		u.User = url.UserPassword(u.User.Username(), password)
		return u.String()
	}
	listen, err := pgx.ParseConfig(withPassword("listen-pw"))
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "env")
	script := filepath.Join(t.TempDir(), "job.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nenv > \""+out+"\"\n"), 0o755))
	e := newEngine(pgtest.OwnPool(t, withPassword("conn-pw"), 4, ""), Options{Schema: db.Schema}, listen)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, e.add(Job{Series: series(t, "cmd", "PT1M"), From: start, To: start.Add(time.Minute),
		LeaseHandler: Command{Path: script, EnvAll: true}.LeaseHandler()}))
	summary, err := e.drain(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, summary.Completed)
	env, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(env), "REPORT_DIR=/srv/reports\n")
	require.NotContains(t, string(env), "conn-pw", "DB_PASS holds the pool's password")
	require.NotContains(t, string(env), "listen-pw", "LISTEN_PASS holds the listener's password")
}

// TestCommandStoppedOnLeaseLoss: when the lease goes, the command's whole
// process group gets SIGTERM.
func TestCommandStoppedOnLeaseLoss(t *testing.T) {
	db := pgtest.New(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "child")
	cmd := Command{Path: "/bin/sh", Args: []string{"-c", `sleep 30 & echo $! > "` + marker + `"; wait`}, Grace: time.Second}
	rec := &recorder{}
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	e.onResult = rec.add
	g := series(t, "lost", "PT1M")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, e.add(Job{Series: g, From: start, To: start.Add(time.Minute), LeaseHandler: cmd.LeaseHandler(),
		Policy: Policy{LeaseTTL: 300 * time.Millisecond}}))
	done := make(chan struct{})
	defer close(done)
	go func() {
		// Take the slot away from under the running command, once it runs
		// (the command writes the marker), and never after the test.
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if pid, err := os.ReadFile(marker); err == nil && len(pid) > 0 {
				_, _ = db.Pool.Exec(context.Background(), sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'COMPLETE', owner = NULL, lease_until = NULL`, db.Schema))
				return
			}
		}
	}()
	_, err := e.drain(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[acquire.Outcome]int{acquire.Abandoned: 1}, rec.outcomes("lost"))
	// Stopped because the lease went, not waited for: a command that ran
	// to its end would have exited 0 and completed the slot.
	require.ErrorIs(t, rec.of("lost")[0].Err, acquire.ErrLeaseLost)
	pid, err := os.ReadFile(marker)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !alive(strings.TrimSpace(string(pid))) }, 5*time.Second, 50*time.Millisecond,
		"the grandchild dies with its process group")
}

// startEngine starts e and stops it when the test ends.
func startEngine(t *testing.T, e *engine) {
	t.Helper()
	require.NoError(t, e.start(context.Background()))
	t.Cleanup(func() { require.NoError(t, e.stop(context.Background())) })
}

// waitCompleted waits, for at most within, until n slots of db's schema
// are COMPLETE.
func waitCompleted(t *testing.T, db *pgtest.DB, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) == n
	}, within, 5*time.Millisecond)
}

// waitIdle waits until s has no worker running and no job marked as having
// work: the state in which only a wake-up (or the poll) sends a worker.
func waitIdle(t *testing.T, e *engine) {
	t.Helper()
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.running > 0 {
			return false
		}
		for _, j := range e.jobs {
			if j.hasWork {
				return false
			}
		}
		return true
	}, time.Minute, time.Millisecond)
}

// alive reports whether a process exists and is not a zombie.
func alive(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestNoLostWakeUps re-opens a slot the moment its previous run completes,
// many times: a wake-up arriving while a worker is looking must not be
// dropped (it would wait for the poll, here a minute).
func TestNoLostWakeUps(t *testing.T) {
	db := pgtest.New(t)
	g := series(t, "rewake", "PT1M")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	done := make(chan struct{}, 1)
	e := newEngine(db.Pool, Options{Schema: db.Schema, PollInterval: time.Minute}, nil)
	require.NoError(t, e.add(Job{Series: g, From: start, To: start.Add(time.Minute),
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error {
			select {
			case done <- struct{}{}:
			default:
			}
			return nil
		}}))
	startEngine(t, e)
	ctx := context.Background()
	cov, err := coverage.New(ctx, db.Pool, g, coverage.Options{Schema: db.Schema})
	require.NoError(t, err)
	for i := range 200 {
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("round %d: the re-opened slot waited for the poll", i)
		}
		waitCompleted(t, db, 1, 3*time.Second)
		// A worker's acquisition attempt can still hold the row lock of a
		// slot completed a moment ago (READ COMMITTED re-checks a locked row
		// and finds it COMPLETE, but keeps the lock); re-open then reports
		// it held, and is simply repeated.
		require.Eventually(t, func() bool {
			res, err := cov.Reopen(ctx, start, start.Add(time.Minute), coverage.WriteOptions{Reason: "again"})
			require.NoError(t, err)
			return res.Changed == 1
		}, 3*time.Second, time.Millisecond, "round %d", i)
	}
}

// TestStartBoundsAcquisition: a job from Start to End runs only the slots
// starting in [Start, End), not older open ones.
func TestStartBoundsAcquisition(t *testing.T) {
	db := pgtest.New(t)
	g := series(t, "bounded", "PT1M")
	start := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	_, _, err := seriesdb.Add(context.Background(), db.Pool, db.Schema, g)
	require.NoError(t, err)
	cov, err := coverage.New(context.Background(), db.Pool, g, coverage.Options{Schema: db.Schema})
	require.NoError(t, err)
	_, err = cov.Materialize(context.Background(), start.Add(-time.Hour), start, coverage.WriteOptions{})
	require.NoError(t, err)
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	require.NoError(t, e.add(Job{Series: g, From: start, To: start.Add(3 * time.Minute),
		LeaseHandler: func(context.Context, *acquire.Lease) error { return nil }}))
	summary, err := e.drain(context.Background())
	require.NoError(t, err)
	require.Equal(t, Summary{Completed: 3}, summary)
	require.Equal(t, 60, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE slot_start < $1 AND status = 'AVAILABLE' AND attempts = 0`, start))
	require.Equal(t, 3, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE slot_start >= $1 AND status = 'COMPLETE'`, start))
}

// TestHandlerErrorIsStorable: a Go handler's error text is stored whatever
// it holds, in both modes.
func TestHandlerErrorIsStorable(t *testing.T) {
	db := pgtest.New(t)
	// A 4096-byte cut would fall in the middle of "é".
	text := "nul \x00 bad \xff " + strings.Repeat("y", 4096-len("nul \x00 bad \xff ")-1) + "é and more"
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := &recorder{}
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	e.onResult = rec.add
	retry := Policy{Retry: func(int, error) (time.Duration, bool) { return time.Hour, true }}
	require.NoError(t, e.add(Job{Series: series(t, "locked", "PT1M"), From: start, To: start.Add(time.Minute), Policy: retry,
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return errors.New(text) }}))
	require.NoError(t, e.add(Job{Series: series(t, "lease", "PT1M"), From: start, To: start.Add(time.Minute), Policy: retry,
		LeaseHandler: func(context.Context, *acquire.Lease) error { return errors.New(text) }}))
	_, err := e.drain(context.Background())
	require.ErrorIs(t, err, ErrIncomplete, "the failed slots are left")
	require.Equal(t, map[acquire.Outcome]int{acquire.Failed: 1}, rec.outcomes("locked"))
	require.Equal(t, map[acquire.Outcome]int{acquire.Failed: 1}, rec.outcomes("lease"))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE fail_count = 1 AND message LIKE $1 AND octet_length(message) <= 4096`,
		"nul \uFFFD bad \uFFFD yyy%"))
}
