package acquire_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/almanactest"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// exampleSeries migrates schema and registers an hourly series with three
// slots in plain SQL, as any program may (docs/sql.md); the Client, the
// scheduler or `almanac materialize` do this in a program.
func exampleSeries(ctx context.Context, pool *pgxpool.Pool, schema string) slot.Series {
	if _, err := migrations.Up(ctx, pool, schema); err != nil {
		panic(err)
	}
	s := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `INSERT INTO `+s+`.series (name, "interval", time_zone, origin)
		VALUES ('hourly', 'PT1H', 'UTC', '2000-01-01T00:00:00Z');
		INSERT INTO `+s+`.slot (name, "interval", slot_start, slot_end)
		SELECT 'hourly', 'PT1H', t, t + interval '1 hour'
		FROM generate_series(timestamptz '2026-03-01T00:00:00Z', '2026-03-01T02:00:00Z', interval '1 hour') AS t`)
	if err != nil {
		panic(err)
	}
	hour, err := slot.ParseInterval("PT1H")
	if err != nil {
		panic(err)
	}
	grid, err := slot.NewSeries("hourly", hour, time.UTC, time.Time{})
	if err != nil {
		panic(err)
	}
	return grid
}

// Locked mode: each Run takes the first acquirable slot, runs the handler
// in the slot's transaction and commits its writes with the slot's
// COMPLETE.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t) // in a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), schema "almanac"
	grid := exampleSeries(ctx, pool, schema)

	q, err := acquire.New(ctx, pool, grid, acquire.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	for {
		res, ok, err := q.Run(ctx, func(ctx context.Context, tx pgx.Tx, s acquire.Slot) error {
			return nil // the slot's work, written in tx
		})
		if err != nil {
			panic(err)
		}
		if !ok {
			break // nothing acquirable
		}
		fmt.Println(res.Slot, res.Outcome, "attempt", res.Slot.Attempt)
	}
	// Output:
	// 2026-03-01T00:00:00Z/PT1H complete attempt 1
	// 2026-03-01T01:00:00Z/PT1H complete attempt 1
	// 2026-03-01T02:00:00Z/PT1H complete attempt 1
}

// Lease mode: Claim holds slots under a lease with a fencing token, without
// holding a connection; KeepAlive renews the leases while the work runs,
// and every write is refused once the lease is lost.
func ExampleQueue_Claim() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t)
	grid := exampleSeries(ctx, pool, schema)

	q, err := acquire.New(ctx, pool, grid, acquire.Options{Schema: schema, Policy: acquire.Policy{LeaseTTL: time.Minute}})
	if err != nil {
		panic(err)
	}
	leases, err := q.Claim(ctx, 2)
	if err != nil {
		panic(err)
	}
	stop := q.KeepAlive(ctx, leases)
	defer stop()
	for _, l := range leases {
		// Long work goes here, passing l.Fence to systems that can refuse
		// a writer with a smaller token; its error (nil here) says the
		// outcome.
		outcome, _, err := l.Finish(ctx, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println(l.Slot.Slot, outcome)
	}
	// Output:
	// 2026-03-01T00:00:00Z/PT1H complete
	// 2026-03-01T01:00:00Z/PT1H complete
}
