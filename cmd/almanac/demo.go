package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/demo/pgcluster"
	"github.com/almanacdev/almanac/internal/demo/sensor"
	"github.com/almanacdev/almanac/internal/progress"
)

// The demo's shape: a week of five-minute windows.
const (
	demoDays      = 7
	demoInstances = 3
	demoWorkers   = 4
)

func (a *app) demoCommand() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show almanac at work in under a minute: crashes, a backfill, and a check that every window was done once",
		Long: `The demo creates its own schema, fills it with a week of synthetic sensor
readings, registers a PT5M series (2,016 windows), materializes it, and lets
three instances of four workers each report every window while instances are
crashed mid-slot and their backends killed. Then late data arrives: two hours
are re-opened and recomputed. It ends with the coverage table and a check of
the result: every window reported exactly once per generation.

Database: --database-url, DATABASE_URL or the PG* variables if set; else the
local server at 127.0.0.1:5432; else a throwaway cluster started from the
installed PostgreSQL binaries and removed afterwards. The demo's schema is
dropped at the end unless --keep is given.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.demo(cmd.Context(), keep) },
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's schema to look at it afterwards")
	return cmd
}

func (a *app) demo(ctx context.Context, keep bool) error {
	out := a.stdout
	pool, where, cleanup, err := a.demoDatabase(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	schema := "almanac_demo_" + randomSuffix()
	fmt.Fprintf(out, "database  %s\nschema    %s\n\n", where, schema)
	if !keep {
		defer func() {
			_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			fmt.Fprintf(out, "\n(schema %s dropped; run with --keep to look at it)\n", schema)
		}()
	}
	began := hostClock()
	client, err := almanac.New(pool, almanac.Options{Schema: schema, ChunkSize: 250})
	if err != nil {
		return err
	}
	if _, err := client.Migrate(ctx); err != nil {
		return err
	}

	// 1. Data and series.
	now := hostClock().UTC()
	to := now.Truncate(5 * time.Minute).Add(-5 * time.Minute) // the last window that is due (one minute of lag)
	from := to.Add(-demoDays * 24 * time.Hour)
	if err := sensor.Setup(ctx, pool, schema, demoDays*24+1, now); err != nil {
		return err
	}
	var readings int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".sensor_reading").Scan(&readings); err != nil {
		return err
	}
	fmt.Fprintf(out, "1. %s synthetic readings from 3 sensors over the last %d days\n", thousands(readings), demoDays)
	series, err := client.Series(ctx, "sensor_report", "PT5M", almanac.SeriesOptions{})
	if err != nil {
		return err
	}
	bar := progress.ForTerminal(a.stderr, "   materializing", !a.json)
	res, err := client.Materialize(ctx, series, from, to, almanac.WriteOptions{Progress: bar.Set})
	bar.Clear()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "2. series sensor_report PT5M, lag PT1M: %s slots materialized for [%s, %s)\n",
		thousands(res.Inserted), from.Format("2006-01-02 15:04"), to.Format("2006-01-02 15:04Z"))

	// 2. Workers, and crashes.
	fmt.Fprintf(out, "3. %d instances x %d workers report every window; instances crash mid-slot and backends are killed\n",
		demoInstances, demoWorkers)
	job := sensor.Job(series, schema, demoDays*24, now)
	job.From, job.To = from, to
	report := job.Handler
	job.Handler = func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
		// A little work, so that crashes land in the middle of some.
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return report(ctx, tx, s)
	}
	chaos, err := runDemoWorkers(ctx, pool, schema, job, func() bool {
		st, err := client.Status(ctx, series, from, to)
		return err == nil && st.Complete == res.Slots
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   all %s windows reported in %.1f s, through %d instance crashes and %d killed backends\n",
		thousands(res.Slots), chaos.elapsed.Seconds(), chaos.crashes, chaos.kills)

	// 3. Late data and a backfill.
	lateFrom := to.Add(-6 * time.Hour).Truncate(time.Hour)
	lateTo := lateFrom.Add(2 * time.Hour)
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `INSERT INTO `+s+`.sensor_reading
		SELECT t, 9, 42 FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 second', interval '20 seconds') t`,
		lateFrom, lateTo); err != nil {
		return err
	}
	reopenedAt := hostClock()
	reopened, err := client.Reopen(ctx, series, lateFrom, lateTo, almanac.WriteOptions{Reason: "late data from sensor 9"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "4. late data for %s to %s: re-opened %d windows", lateFrom.Format("Jan 2 15:04"), lateTo.Format("15:04"), reopened.Changed)
	if _, err := runDemoWorkers(ctx, pool, schema, job, func() bool {
		st, err := client.Status(ctx, series, lateFrom, lateTo)
		return err == nil && st.Complete == reopened.Changed
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, ", recomputed in %d ms\n", time.Since(reopenedAt).Milliseconds())

	// 4. Coverage and verification.
	status, err := client.Status(ctx, series, from, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "5. coverage of the week:\n")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, row := range []struct {
		state string
		n     int64
	}{{"complete", status.Complete}, {"skip", status.Skip}, {"available", status.Available}, {"in backoff", status.Backoff},
		{"parked", status.Parked}, {"acquired", status.Acquired}, {"missing", status.Missing}} {
		fmt.Fprintf(tw, "     %s\t%s\n", row.state, thousands(row.n))
	}
	gaps := "none"
	if status.Gaps > 0 {
		gaps = fmt.Sprint(status.Gaps)
	}
	fmt.Fprintf(tw, "     gaps\t%s\n", gaps)
	if err := tw.Flush(); err != nil {
		return err
	}
	var rows, duplicates, recomputed int64
	err = pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE computations <> 1 + (window_start >= $1 AND window_start < $2)::int),
		count(*) FILTER (WHERE computations = 2)
		FROM `+s+`.sensor_report`, lateFrom, lateTo).Scan(&rows, &duplicates, &recomputed)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nverified: %s slots, %s report rows, %d duplicates, %d re-opened windows recomputed once (%.1f s)\n",
		thousands(status.Slots), thousands(rows), duplicates, recomputed, time.Since(began).Seconds())
	if rows != status.Slots || duplicates != 0 || status.Complete != status.Slots || status.Missing != 0 || recomputed != reopened.Changed {
		return problemError(errors.New("verification failed: the numbers above should match"))
	}
	return nil
}

type demoChaos struct {
	crashes, kills int64
	elapsed        time.Duration
}

// runDemoWorkers runs demoInstances clients of the job until done reports
// true, crashing one instance every 200 ms (its running handlers are
// cancelled mid-slot and roll back) and terminating a worker backend every
// 150 ms.
func runDemoWorkers(ctx context.Context, pool *pgxpool.Pool, schema string, job almanac.Job, done func() bool) (chaos demoChaos, err error) {
	began := hostClock()
	start := func() (*almanac.Client, error) {
		c, err := almanac.New(pool, almanac.Options{Schema: schema, Concurrency: demoWorkers,
			PollInterval: 100 * time.Millisecond, ShutdownTimeout: time.Millisecond})
		if err != nil {
			return nil, err
		}
		if err := c.Register(job); err != nil {
			return nil, err
		}
		return c, c.Start(ctx)
	}
	instances := make([]*almanac.Client, demoInstances)
	for i := range instances {
		var err error
		if instances[i], err = start(); err != nil {
			return chaos, err
		}
	}
	defer func() {
		for _, c := range instances {
			if c != nil {
				_ = c.Stop(context.WithoutCancel(ctx))
			}
		}
	}()
	var kills atomic.Int64
	stopKilling := make(chan struct{})
	var killer sync.WaitGroup
	killer.Add(1)
	go func() {
		defer killer.Done()
		for {
			select {
			case <-stopKilling:
				return
			case <-time.After(150 * time.Millisecond):
			}
			var n int64
			// A worker's backend in the middle of a slot's transaction.
			err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
				WHERE application_name = 'almanac-demo' AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()
				ORDER BY random() LIMIT 1) v`).Scan(&n)
			if err == nil {
				kills.Add(n)
			}
		}
	}()
	defer func() { close(stopKilling); killer.Wait(); chaos.kills = kills.Load() }()
	for i := 0; !done(); i = (i + 1) % demoInstances {
		select {
		case <-ctx.Done():
			return chaos, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if done() {
			break
		}
		if err := instances[i].Stop(ctx); err != nil {
			return chaos, err
		}
		var err error
		if instances[i], err = start(); err != nil {
			return chaos, err
		}
		chaos.crashes++
	}
	chaos.elapsed = time.Since(began)
	return chaos, nil
}

// demoDatabase finds a database for the demo: the configured one, else the
// local server, else a throwaway cluster. cleanup closes the pool and
// removes a throwaway cluster.
func (a *app) demoDatabase(ctx context.Context) (*pgxpool.Pool, string, func(), error) {
	configured := a.databaseURL != ""
	for _, k := range []string{"PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"} {
		configured = configured || a.getenv(k) != ""
	}
	open := func(url string) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = demoInstances*demoWorkers + 8
		cfg.ConnConfig.RuntimeParams["application_name"] = "almanac-demo"
		if cfg.ConnConfig.ConnectTimeout == 0 {
			cfg.ConnConfig.ConnectTimeout = 3 * time.Second
		}
		almanac.ConfigurePool(cfg)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			if err = pool.Ping(ctx); err != nil {
				pool.Close()
			}
		}
		return pool, err
	}
	if configured {
		pool, err := open(a.databaseURL)
		if err != nil {
			return nil, "", nil, unavailableError(fmt.Errorf("cannot reach the database from %s: %s; fix it, or unset it to let the demo find or start one", a.urlFrom, connectCause(err)))
		}
		return pool, "from " + a.urlFrom, pool.Close, nil
	}
	for _, url := range []string{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://127.0.0.1:5432/postgres?sslmode=disable"} {
		if pool, err := open(url); err == nil {
			return pool, "the local server at 127.0.0.1:5432", pool.Close, nil
		}
	}
	bin, err := pgcluster.Find()
	if err != nil {
		return nil, "", nil, unavailableError(errors.New("no database: nothing answers at 127.0.0.1:5432 and no PostgreSQL binaries were found; " +
			"set DATABASE_URL=postgres://user@host:5432/db, start a local server, or install PostgreSQL (e.g. apt-get install postgresql) so the demo can start one"))
	}
	fmt.Fprintf(a.stderr, "no server at 127.0.0.1:5432: starting a throwaway cluster from %s ...\n", bin)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{BinDir: bin, Settings: pgcluster.FastSettings})
	if err != nil {
		return nil, "", nil, unavailableError(fmt.Errorf("starting a throwaway cluster: %w", err))
	}
	pool, err := open(cluster.URL("postgres"))
	if err != nil {
		_ = cluster.Destroy()
		return nil, "", nil, unavailableError(fmt.Errorf("connecting to the throwaway cluster: %w", err))
	}
	return pool, "a throwaway cluster in " + cluster.Dir() + " (removed at the end)", func() {
		pool.Close()
		_ = cluster.Destroy()
	}, nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// thousands writes n with thousands separators: 2,016.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
