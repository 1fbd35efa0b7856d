package almanac_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/longtest"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// faultRounds is how many lifecycles TestLifecycleUnderFaults runs: short
// by default, long with ALMANAC_LONG_TESTS, or ALMANAC_FAULT_ROUNDS (e.g.
// 200) for a soak.
func faultRounds(t *testing.T, short, long int) int {
	text := os.Getenv("ALMANAC_FAULT_ROUNDS")
	if text == "" {
		return longtest.Pick(short, long)
	}
	n, err := strconv.Atoi(text)
	require.NoError(t, err, "ALMANAC_FAULT_ROUNDS")
	return n
}

// TestLifecycleUnderFaults runs the whole life of a program — Migrate,
// Series, Start, the workers, Stop, Reopen, Drain, Status, Gaps — while
// every backend of its pool (and its LISTEN connection) is terminated every
// 50–200 ms. No call may return an error, every slot must be complete with
// exactly one effect per generation, and none may be lost. The fault plan is
// seeded (ALMANAC_FAULT_SEED replays one). A second run does the same as a
// role whose idle_session_timeout (1 s) ends every connection that idles.
func TestLifecycleUnderFaults(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if text := os.Getenv("ALMANAC_FAULT_SEED"); text != "" {
		var err error
		seed, err = strconv.ParseUint(text, 10, 64)
		require.NoError(t, err, "ALMANAC_FAULT_SEED")
	}
	t.Logf("ALMANAC_FAULT_SEED=%d", seed)
	// Rounds rotate through the three modes: at least three each.
	t.Run("terminated backends", func(t *testing.T) {
		t.Parallel()
		lifecycleUnderFaults(t, pgtest.URL(t), faultRounds(t, 3, 8), rand.New(rand.NewPCG(seed, 1)))
	})
	t.Run("idle_session_timeout", func(t *testing.T) {
		t.Parallel()
		role := "almanac_idle_" + strconv.FormatUint(seed%1_000_000, 10)
		admin := pgtest.Pool(t)
		ctx := context.Background()
		_, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN SUPERUSER; ALTER ROLE %[1]s SET idle_session_timeout = '1s'`, role))
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
		cfg, err := pgx.ParseConfig(pgtest.URL(t))
		require.NoError(t, err)
		url := fmt.Sprintf("postgres://%s@%s:%d/%s", role, cfg.Host, cfg.Port, cfg.Database)
		lifecycleUnderFaults(t, url, faultRounds(t, 3, 4), rand.New(rand.NewPCG(seed, 2)))
	})
}

func lifecycleUnderFaults(t *testing.T, url string, rounds int, rng *rand.Rand) {
	const slots = 40
	app := fmt.Sprintf("almanac-fault-%d", rng.Uint32())
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 12
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	acquire.ConfigurePool(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	admin := pgtest.Pool(t)

	// A migration is one transaction of many DDL statements, repeated
	// whole when its backend dies: it needs a window between two kills as
	// long as it takes. How long that is depends on how busy the machine
	// is, so while Migrate runs the injector waits that much longer: the
	// time an unfaulted Migrate of a scratch schema takes now, measured
	// before the injector starts (a sum over every migration, so at least
	// the longest one).
	scratch, err := almanac.New(admin, almanac.Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	began := time.Now()
	_, err = scratch.Migrate(ctx)
	require.NoError(t, err)
	migrateSlack := time.Since(began)
	var slack atomic.Int64

	// The injector terminates every backend of the program's pool.
	var kills int
	stop := make(chan struct{})
	var injector sync.WaitGroup
	injector.Add(1)
	delays := make([]time.Duration, 0, 1024)
	for range cap(delays) {
		delays = append(delays, time.Duration(50+rng.IntN(151))*time.Millisecond)
	}
	go func() {
		defer injector.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(delays[i%len(delays)] + time.Duration(slack.Load())):
			}
			var n int
			if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err == nil {
				kills += n
			}
		}
	}()
	defer func() {
		close(stop)
		injector.Wait()
		t.Logf("%d rounds, %d backends terminated", rounds, kills)
	}()

	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(slots * time.Minute)
	for round := range rounds {
		schema := pgtest.Schema(t)
		exec := func(sql string, args ...any) {
			t.Helper()
			_, err := admin.Exec(ctx, sqlschema.Render(sql, schema), args...)
			require.NoError(t, err)
		}
		count := func(sql string, args ...any) int {
			t.Helper()
			var n int
			require.NoError(t, admin.QueryRow(ctx, sqlschema.Render(sql, schema), args...).Scan(&n))
			return n
		}
		client, err := almanac.New(pool, almanac.Options{Schema: schema, Concurrency: 4,
			PollInterval: 200 * time.Millisecond, ShutdownTimeout: time.Second})
		require.NoError(t, err)
		slack.Store(int64(migrateSlack))
		_, err = client.Migrate(ctx)
		slack.Store(0)
		require.NoError(t, err, "round %d: Migrate", round)
		exec(`CREATE TABLE {{schema}}.effect (slot_start timestamptz NOT NULL, fence bigint NOT NULL)`)
		exec(`CREATE TABLE {{schema}}.reopening (slot_start timestamptz NOT NULL)`)
		exec(`CREATE FUNCTION {{schema}}.log_reopen() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO {{schema}}.reopening VALUES (NEW.slot_start); RETURN NEW; END $$`)
		exec(`CREATE TRIGGER log_reopen AFTER UPDATE OF status ON {{schema}}.slot FOR EACH ROW
			WHEN (OLD.status = 'COMPLETE' AND NEW.status = 'AVAILABLE') EXECUTE FUNCTION {{schema}}.log_reopen()`)
		series, err := client.Series(ctx, "work", "PT1M", almanac.SeriesOptions{})
		require.NoError(t, err, "round %d: Series", round)
		insert := sqlschema.Render(`INSERT INTO {{schema}}.effect VALUES ($1, $2)`, schema)
		job := almanac.Job{Series: series, From: from, To: to,
			Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
				_, err := tx.Exec(ctx, insert, s.Start, s.Fence)
				return err
			},
			LeaseHandler: func(ctx context.Context, l *almanac.Lease) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := l.CompleteTx(ctx, tx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, insert, l.Start, l.Fence)
					return err
				})
			},
			Policy: almanac.Policy{LeaseTTL: 2 * time.Second},
		}
		switch round % 3 { // locked, batched locked, lease mode
		case 0:
			job.LeaseHandler = nil
		case 1:
			job.LeaseHandler, job.Batch = nil, 5
		case 2:
			job.Handler = nil
		}
		require.NoError(t, client.Register(job))
		require.NoError(t, client.Start(ctx), "round %d: Start", round)
		require.Eventually(t, func() bool {
			return count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) == slots
		}, 2*time.Minute, 20*time.Millisecond, "round %d: the started workers complete every slot", round)
		require.NoError(t, client.Stop(ctx), "round %d: Stop", round)

		reopened, err := client.Reopen(ctx, series, from.Add(10*time.Minute), from.Add(20*time.Minute), almanac.WriteOptions{Reason: "late data"})
		require.NoError(t, err, "round %d: Reopen", round)
		require.Empty(t, reopened.Held, "round %d: nothing is held once the workers stopped", round)
		drainer, err := almanac.New(pool, almanac.Options{Schema: schema, Concurrency: 4, PollInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, drainer.Register(job))
		_, err = drainer.Drain(ctx)
		require.NoError(t, err, "round %d: Drain", round)

		status, err := client.Status(ctx, series, from, to)
		require.NoError(t, err, "round %d: Status", round)
		require.Equal(t, int64(slots), status.Complete, "round %d: every slot complete", round)
		gaps, err := client.Gaps(ctx, series, from, to)
		require.NoError(t, err, "round %d: Gaps", round)
		require.Empty(t, gaps)

		// Exactly one effect per slot per generation, each committed with
		// the completion that carries its fence.
		require.Equal(t, slots+int(reopened.Changed), count(`SELECT count(*) FROM {{schema}}.effect`), "round %d", round)
		require.Zero(t, count(`SELECT count(*) FROM (SELECT e.slot_start, count(*) AS n, max(coalesce(r.n, 0)) AS again
			FROM {{schema}}.effect e LEFT JOIN (SELECT slot_start, count(*) AS n FROM {{schema}}.reopening GROUP BY 1) r USING (slot_start)
			GROUP BY e.slot_start) x WHERE n <> 1 + again`), "round %d: a slot worked more or less than once per generation", round)
		require.Zero(t, count(`SELECT count(*) FROM {{schema}}.slot s WHERE NOT EXISTS (
			SELECT 1 FROM {{schema}}.effect e WHERE e.slot_start = s.slot_start AND e.fence = s.fence)`), "round %d: a completion without its effect", round)
	}
}
