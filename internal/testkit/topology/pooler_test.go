//go:build linux

package topology

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
)

// rangeFrom is where the tests' slot ranges begin: in the past, so every
// slot is due at once.
var rangeFrom = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestPgBouncer works every mode, the sidecar and wake-ups through a real
// PgBouncer, in session pooling and in transaction pooling, with the URL an
// application would be given (nothing added) and, in transaction pooling,
// also with pgx's simple protocol (the workaround for PgBouncer before
// 1.21, which cannot keep protocol-level prepared statements across
// transactions).
func TestPgBouncer(t *testing.T) {
	t.Parallel() // most of its time is spent waiting on servers
	for _, c := range []struct {
		name, mode, params string
	}{
		{"session", Session, ""},
		{"transaction-simple-protocol", Transaction, "default_query_exec_mode=simple_protocol"},
		{"transaction", Transaction, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each mode has its own PgBouncer and schema
			p := &poolerCase{mode: c.mode, bouncer: bouncer(t, c.mode), schema: pgtest.Schema(t), direct: pgtest.Pool(t)}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("PgBouncer log:\n%s", p.bouncer.Log())
				}
			})
			p.url = p.bouncer.URL(database(t))
			if c.params != "" {
				p.url += "&" + c.params
			}
			t.Run("library", p.library)
			t.Run("named statements refused", p.namedStatements)
			t.Run("sidecar", p.sidecar)
			t.Run("wake", p.wake)
		})
	}
}

// database returns the tests' database name.
func database(t *testing.T) string {
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	return cfg.Database
}

type poolerCase struct {
	mode    string
	bouncer *PgBouncer
	url     string // through the pooler
	schema  string
	direct  *pgxpool.Pool // the tests' direct pool, for checks
}

// library migrates, materializes and runs locked, batched and lease-mode
// jobs through the pooler with the Client, each handler writing an effect
// row in the slot's transaction: every slot must end COMPLETE with exactly
// one effect, and gaps and status must agree.
func (p *poolerCase) library(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The pool an application opens with almanac: it finds the pooler and
	// runs its statements, and the handlers', without named prepared
	// statements.
	pool, err := almanac.NewPool(ctx, p.url, almanac.PoolOptions{MaxConns: 8})
	require.NoError(t, err)
	defer pool.Close()
	client, err := almanac.New(pool, almanac.Options{Schema: p.schema, Concurrency: 4})
	require.NoError(t, err)
	_, err = client.Migrate(ctx)
	require.NoError(t, err, "migrate through the pooler")

	effect := sqlschema.Render(`{{schema}}.effect`, p.schema)
	_, err = p.direct.Exec(ctx, `CREATE TABLE `+effect+` (series text, slot text, fence bigint)`)
	require.NoError(t, err)
	const perSeries = 60
	to := rangeFrom.Add(perSeries * time.Minute)
	record := func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effect+` VALUES ($1, $2, $3)`, s.Name, s.Slot.String(), s.Fence)
		return err
	}
	var grids []almanac.Series
	for _, mode := range []string{"locked", "batch", "lease"} {
		grid, err := client.Series(ctx, "pooled_"+mode, "PT1M", almanac.SeriesOptions{})
		require.NoError(t, err)
		grids = append(grids, grid)
		res, err := client.Materialize(ctx, grid, rangeFrom, to, almanac.WriteOptions{})
		require.NoError(t, err)
		require.EqualValues(t, perSeries, res.Inserted)
		job := almanac.Job{Series: grid, From: rangeFrom, To: to, Handler: record}
		if mode == "batch" {
			job.Batch = 7
		}
		if mode == "lease" {
			job.Handler = nil
			job.LeaseHandler = func(ctx context.Context, l *acquire.Lease) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := record(ctx, tx, l.Slot); err != nil {
						return err
					}
					return l.CompleteTx(ctx, tx)
				})
			}
		}
		require.NoError(t, client.Register(job))
	}
	summary, err := client.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 3*perSeries, summary.Completed, "outcomes: %v", summary)

	for _, grid := range grids {
		gaps, err := client.Gaps(ctx, grid, rangeFrom, to)
		require.NoError(t, err)
		require.Empty(t, gaps)
		st, err := client.Status(ctx, grid, rangeFrom, to)
		require.NoError(t, err)
		require.Equal(t, 100.0, st.Covered(), "status of %s: %+v", grid.Name(), st)
	}
	var complete, effects, dups int
	require.NoError(t, p.direct.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+sqlschema.Render(`{{schema}}.slot`, p.schema)+` WHERE status = 'COMPLETE'),
		(SELECT count(*) FROM `+effect+`),
		(SELECT count(*) FROM (SELECT 1 FROM `+effect+` GROUP BY series, slot HAVING count(*) > 1) d)`).Scan(&complete, &effects, &dups))
	require.Equal(t, 3*perSeries, complete)
	require.Equal(t, 0, dups, "slots with more than one effect")
	require.Equal(t, 3*perSeries, effects)
}

// namedStatements: a pool of the application's own making that prepares
// named statements (pgx's default) through a pooler is refused with
// ErrPooler at the first call, deterministically, instead of failing at
// random through transaction pooling; said to pool sessions, it is used.
func (p *poolerCase) namedStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, p.url)
	require.NoError(t, err)
	defer pool.Close()
	client, err := almanac.New(pool, almanac.Options{Schema: p.schema})
	require.NoError(t, err)
	if strings.Contains(p.url, "default_query_exec_mode") {
		_, err = client.Migrate(ctx)
		require.NoError(t, err, "no named statements: nothing to refuse")
		return
	}
	_, err = client.Migrate(ctx)
	require.ErrorIs(t, err, almanac.ErrPooler)
	if p.mode == Session {
		client, err = almanac.New(pool, almanac.Options{Schema: p.schema, Pooler: almanac.PoolerSession})
		require.NoError(t, err)
		_, err = client.Migrate(ctx)
		require.NoError(t, err)
	}
}

// sidecar runs `almanac run --once` through the pooler over 30 slots: each
// runs once and the sidecar exits 0.
func (p *poolerCase) sidecar(t *testing.T) {
	runs := runsFile(t)
	const slots = 30
	s := startSidecar(t, "once", append([]string{"--database-url", p.url, "--schema", p.schema,
		"run", "pooled_sidecar", "--interval", "PT1M", "--workers", "3", "--once",
		"--from", rangeFrom.Format(time.RFC3339), "--to", rangeFrom.Add(slots * time.Minute).Format(time.RFC3339), "--"},
		recordCommand(runs, 0)...)...)
	code := s.wait(t, 2*time.Minute)
	require.Equal(t, 0, code, "almanac run --once exit code; output:\n%s", s.out)
	got := readRuns(t, runs)
	require.Empty(t, duplicates(got))
	require.Len(t, got, slots)
}

// wakeLine matches the sidecar's warning that wake-ups fall back to
// polling because LISTEN cannot work through its connection.
var wakeLine = regexp.MustCompile(`(?i)(listen|wake).*poll`)

// wake re-opens a slot a sidecar completed while the sidecar is idle and
// measures, on the database clock, how long the re-opened slot waited for
// its claim. Through session pooling LISTEN works and the sidecar must
// be woken well within the poll interval. Through transaction pooling
// LISTEN cannot deliver: without --listen-url the sidecar must say once that wake-ups
// fall back to polling (and still re-run the slot at the next poll); with
// --listen-url (a direct connection for LISTEN only) it must be woken as
// fast again.
func (p *poolerCase) wake(t *testing.T) {
	if p.mode == Session {
		p.wakeWith(t, "session", nil, true)
		return
	}
	t.Run("polling", func(t *testing.T) { p.wakeWith(t, "polling", nil, false) })
	t.Run("listen-url", func(t *testing.T) {
		p.wakeWith(t, "listen_url", []string{"--listen-url", pgtest.URL(t)}, true)
	})
}

// wakeLatency bounds the wake-up of an idle sidecar that can LISTEN: half
// the poll interval, so a sidecar that only polled would miss it half the
// time (and warn that it polls, which the test also rules out), while a
// notification delivered on a 2-core machine loaded far beyond CI stays
// well inside it.
const wakeLatency = defaultPoll / 2

func (p *poolerCase) wakeWith(t *testing.T, name string, flags []string, listens bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs := runsFile(t)
	series := "wake_" + name[:1] // not the words the warning is matched by
	const leaseTTL = 30 * time.Second
	args := append([]string{"--database-url", p.url, "--schema", p.schema}, flags...)
	args = append(args, "run", series, "--interval", "PT1M", "--workers", "2", "--lease-ttl", leaseTTL.String(),
		"--from", rangeFrom.Format(time.RFC3339), "--to", rangeFrom.Add(2*time.Minute).Format(time.RFC3339), "--")
	// Each run lasts long enough for the test to read its claim time off
	// the slot row while it is held (heartbeats start at a third of the
	// lease).
	s := startSidecar(t, name, append(args, recordCommand(runs, 2)...)...)
	slotTable := sqlschema.Render(`{{schema}}.slot`, p.schema)
	waitFor(t, s, 60*time.Second, "both slots complete", func() bool {
		var n int
		return p.direct.QueryRow(ctx, `SELECT count(*) FROM `+slotTable+` WHERE name = $1 AND status = 'COMPLETE'`, series).Scan(&n) == nil && n == 2
	})
	if listens {
		channel := wake.Channel(p.schema)
		waitFor(t, s, 30*time.Second, "the sidecar LISTENs on a server connection", func() bool {
			var n int
			err := p.direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
				"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&n)
			return err == nil && n > 0
		})
	}

	before := len(readRuns(t, runs))
	var reopenedAt time.Time
	require.NoError(t, p.direct.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&reopenedAt))
	pool, err := almanac.NewPool(ctx, p.url, almanac.PoolOptions{})
	require.NoError(t, err)
	defer pool.Close()
	client, err := almanac.New(pool, almanac.Options{Schema: p.schema})
	require.NoError(t, err)
	grid, err := client.Series(ctx, series, "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	res, err := client.Reopen(ctx, grid, rangeFrom, rangeFrom.Add(time.Minute), almanac.WriteOptions{Reason: "topology test"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Changed)

	waitFor(t, s, 2*defaultPoll+10*time.Second, "the re-opened slot runs again", func() bool {
		return len(readRuns(t, runs)) > before
	})
	var claimedAt time.Time
	require.NoError(t, p.direct.QueryRow(ctx, `SELECT lease_until - $3 * interval '1 microsecond' FROM `+slotTable+`
		WHERE name = $1 AND slot_start = $2 AND status = 'ACQUIRED'`, series, rangeFrom, leaseTTL.Microseconds()).Scan(&claimedAt))
	latency := claimedAt.Sub(reopenedAt)
	t.Logf("%s: re-open to claim %s (database clock)", name, latency.Round(time.Millisecond))
	if listens {
		require.Less(t, latency, wakeLatency, "an idle sidecar that LISTENs was woken late")
	} else {
		waitFor(t, s, 10*time.Second, "a warning that wake-ups fall back to polling", func() bool {
			return wakeLine.MatchString(s.out.String())
		})
	}
	out := s.out.String()
	warnings := 0
	for _, line := range strings.Split(out, "\n") {
		if wakeLine.MatchString(line) {
			warnings++
		}
	}
	if listens {
		require.Zero(t, warnings, "the sidecar warned about polling although it LISTENs:\n%s", out)
	} else {
		require.Equal(t, 1, warnings, "warnings that wake-ups fall back to polling:\n%s", out)
	}
	require.Equal(t, 0, s.stop(t, 30*time.Second), "exit code after SIGTERM")
	perSlot := map[string]int{}
	for _, r := range readRuns(t, runs) {
		perSlot[r.slot]++
	}
	require.Equal(t, map[string]int{
		rangeFrom.Format(time.RFC3339) + "/PT1M":                  2, // once, and once after the re-open
		rangeFrom.Add(time.Minute).Format(time.RFC3339) + "/PT1M": 1,
	}, perSlot)
}

// waitFor polls cond every 50 ms until it holds, failing the test after
// limit or when the sidecar exits.
func waitFor(t *testing.T, s *sidecar, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if s != nil && s.exited() {
			t.Fatalf("waiting for %s: sidecar %s exited with %v; output:\n%s", what, s.name, s.err, s.out)
		}
		if time.Now().After(deadline) {
			out := ""
			if s != nil {
				out = s.out.String()
			}
			t.Fatalf("%s: not within %s; sidecar output:\n%s", what, limit, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// defaultPoll is the default of almanac.Options.PollInterval: how long a
// worker that missed a wake-up waits at most.
const defaultPoll = 5 * time.Second
