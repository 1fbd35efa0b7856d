package suite

import (
	"context"
	"errors"
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

// River (github.com/riverqueue/river) is linked into the bench as a
// library and runs in the bench's process, on the same database, in a
// schema of its own, with a warm pool of the same size as almanac's. It is
// configured as River's own benchmark (`river bench`) configures itself:
// the default completer, a 2 ms fetch cooldown, a 20 ms fetch poll interval
// and 2,000 workers.

const (
	// riverInsertBatch is how many jobs one InsertManyFast (a COPY) carries.
	riverInsertBatch = 5_000
	// riverMaxWorkers is MaxWorkers of River's default queue.
	riverMaxWorkers = 2_000
)

// riverSide is River on the benchmarked database: a migrated schema and a
// warm pool kept for all the repeats of a scenario.
type riverSide struct {
	e      *env
	schema string
	pool   *pgxpool.Pool
	driver *riverpgxv5.Driver
	logger *slog.Logger
}

// newRiver creates a schema holding River's tables and a warm pool of
// maxConns connections; close drops both.
func (e *env) newRiver(ctx context.Context, maxConns int) (*riverSide, error) {
	schema, err := e.createSchema(ctx, "river")
	if err != nil {
		return nil, err
	}
	r := &riverSide{e: e, schema: schema,
		logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if r.pool, err = e.pool(ctx, maxConns); err != nil {
		r.close()
		return nil, err
	}
	r.driver = riverpgxv5.New(r.pool)
	migrator, err := rivermigrate.New(r.driver, &rivermigrate.Config{Schema: schema, Logger: r.logger})
	if err == nil {
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	return r, nil
}

func (r *riverSide) close() {
	if r.pool != nil {
		r.pool.Close()
	}
	r.e.dropSchema(r.schema)
}

// noopArgs are the arguments of a job that does nothing.
type noopArgs struct{}

// Kind is River's name for the job type.
func (noopArgs) Kind() string { return "noop" }

// run has River work jobs no-op jobs and returns jobs per second, from the
// moment Client.Start has returned to the last completion event (sent once
// the completer has written the row: the job is durably completed). Every
// job must have run exactly once, counted by its worker, and be
// completed in the table.
func (r *riverSide) run(ctx context.Context, jobs int) (float64, error) {
	table := pgx.Identifier{r.schema, "river_job"}.Sanitize()
	if _, err := r.pool.Exec(ctx, "TRUNCATE "+table+" RESTART IDENTITY"); err != nil {
		return 0, fmt.Errorf("river: truncate: %w", err)
	}
	c := newCounter(jobs)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[noopArgs]) error {
		c.ran(int(job.ID - 1)) // ids restart at 1
		return nil
	}))
	client, err := river.NewClient(r.driver, &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            r.logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Schema:            r.schema,
		Workers:           workers,
	})
	if err != nil {
		return 0, fmt.Errorf("river: client: %w", err)
	}
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for left := jobs; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, riverInsertBatch) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, fmt.Errorf("river: insert jobs: %w", err)
		}
	}
	if _, err := r.pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return 0, fmt.Errorf("river: vacuum: %w", err)
	}
	if err := r.e.checkpoint(ctx); err != nil {
		return 0, err
	}

	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: jobs + 1_000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return 0, fmt.Errorf("river: start: %w", err)
	}
	start := time.Now()
	elapsed, waitErr := awaitCompletions(ctx, events, jobs, start)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil && waitErr == nil {
		waitErr = fmt.Errorf("river: stop: %w", err)
	}
	if waitErr != nil {
		return 0, waitErr
	}
	if err := c.check("River"); err != nil {
		return 0, err
	}
	var completed int
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE state = 'completed'").Scan(&completed); err != nil {
		return 0, fmt.Errorf("river: count: %w", err)
	}
	if completed != jobs {
		return 0, fmt.Errorf("%w: River: %d of %d jobs completed", ErrNotExactlyOnce, completed, jobs)
	}
	return float64(jobs) / elapsed.Seconds(), nil
}

// awaitCompletions waits for jobs completion events and returns the time
// from start to the last one. A failed or cancelled job is an error: the
// worker never fails, so it means the comparison is not like for like.
func awaitCompletions(ctx context.Context, events <-chan *river.Event, jobs int, start time.Time) (time.Duration, error) {
	for done := 0; done < jobs; {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("river: %d of %d jobs completed before giving up: %w", done, jobs, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return 0, errors.New("river: subscription closed")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("river: job %d: unexpected event %s", ev.Job.ID, ev.Kind)
			}
			done++
		}
	}
	return time.Since(start), nil
}
