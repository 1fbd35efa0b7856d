// Command riverbench is the River side of `almanac bench`: it works a number
// of no-op River jobs and reports how long River took. It is a module of its
// own so that almanac's users never download River; almanac bench builds it
// from a source checkout and runs it as a subprocess.
//
// Usage:
//
//	DATABASE_URL=postgres://... riverbench -schema S -jobs N [-max-conns C] [-checkpoint]
//
// It installs River's tables in schema S (which must exist and is left in
// place for the caller to drop), inserts N jobs, vacuums the job table, then
// starts a client configured as River's own benchmark (`river bench`)
// configures itself — the default completer, a 2 ms fetch cooldown, a 20 ms
// poll interval and 2,000 workers — and times it from Start until the last
// completion event. It prints one JSON line on stdout:
//
//	{"jobs": N, "seconds": S}
//
// The database URL comes from DATABASE_URL, else from the libpq PG*
// variables.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// insertBatch is how many jobs one InsertManyFast (a COPY) carries.
const insertBatch = 5_000

// result is the line printed on stdout.
type result struct {
	Jobs    int     `json:"jobs"`
	Seconds float64 `json:"seconds"`
}

func main() {
	schema := flag.String("schema", "", "schema to install River's tables in (must exist)")
	jobs := flag.Int("jobs", 10_000, "number of no-op jobs to work")
	maxConns := flag.Int("max-conns", 12, "size of River's connection pool")
	maxWorkers := flag.Int("max-workers", 2_000, "MaxWorkers of the default queue")
	checkpoint := flag.Bool("checkpoint", false, "run CHECKPOINT after loading, before timing")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *schema == "" || *jobs < 1 || *maxConns < 2 || *maxWorkers < 1 {
		fmt.Fprintln(os.Stderr, "riverbench: -schema is required; -jobs, -max-conns (>= 2) and -max-workers must be positive")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := run(ctx, *schema, *jobs, *maxConns, *maxWorkers, *checkpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, schema string, jobs, maxConns, maxWorkers int, checkpoint bool) (result, error) {
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return result{}, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	driver := riverpgxv5.New(pool)

	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return result{}, fmt.Errorf("migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return result{}, fmt.Errorf("migrate: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Schema:            schema,
		Workers:           workers,
	})
	if err != nil {
		return result{}, fmt.Errorf("client: %w", err)
	}

	if err := insert(ctx, client, jobs); err != nil {
		return result{}, err
	}
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return result{}, fmt.Errorf("vacuum: %w", err)
	}
	if checkpoint {
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return result{}, fmt.Errorf("checkpoint: %w", err)
		}
	}

	// Counting completion events, as River's benchmark does, includes the
	// completer's write: an event is sent once the job's row says completed.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: jobs + 1_000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, fmt.Errorf("start: %w", err)
	}
	elapsed, waitErr := awaitCompletions(ctx, events, jobs, start)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil && waitErr == nil {
		waitErr = fmt.Errorf("stop: %w", err)
	}
	if waitErr != nil {
		return result{}, waitErr
	}

	var completed int
	err = pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE state = 'completed'").Scan(&completed)
	if err != nil {
		return result{}, fmt.Errorf("count: %w", err)
	}
	if completed != jobs {
		return result{}, fmt.Errorf("%d of %d jobs completed", completed, jobs)
	}
	return result{Jobs: jobs, Seconds: elapsed.Seconds()}, nil
}

// noopArgs are the arguments of a job that does nothing.
type noopArgs struct{}

// Kind is River's name for the job type.
func (noopArgs) Kind() string { return "noop" }

func insert(ctx context.Context, client *river.Client[pgx.Tx], jobs int) error {
	params := make([]river.InsertManyParams, 0, insertBatch)
	for left := jobs; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, insertBatch) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
	}
	return nil
}

// awaitCompletions waits for jobs completion events and returns the time
// from start to the last one. A failed or cancelled job is an error: the
// worker never fails, so it means the comparison is not like for like.
func awaitCompletions(ctx context.Context, events <-chan *river.Event, jobs int, start time.Time) (time.Duration, error) {
	for done := 0; done < jobs; {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%d of %d jobs completed before giving up: %w", done, jobs, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return 0, errors.New("subscription closed")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("job %d: unexpected event %s", ev.Job.ID, ev.Kind)
			}
			done++
		}
	}
	return time.Since(start), nil
}
