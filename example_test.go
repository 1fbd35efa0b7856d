package almanac_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/almanactest"
)

// A report per five-minute window, each written exactly once, in the same
// transaction that marks its slot COMPLETE.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t) // in a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), schema "almanac"
	client, err := almanac.New(pool, almanac.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := client.Migrate(ctx); err != nil {
		panic(err)
	}
	reports, err := client.Series(ctx, "sensor_report", "PT5M", almanac.SeriesOptions{TimeZone: "UTC"})
	if err != nil {
		panic(err)
	}
	table := pgx.Identifier{schema, "report"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (slot text PRIMARY KEY, fence bigint)"); err != nil {
		panic(err)
	}

	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)
	err = client.Register(almanac.Job{
		Series: reports,
		From:   from,
		To:     to,
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2)", s.String(), s.Fence)
			return err
		}})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	gaps, err := client.Gaps(ctx, reports, from, to)
	if err != nil {
		panic(err)
	}
	var first string
	if err := pool.QueryRow(ctx, "SELECT min(slot) FROM "+table).Scan(&first); err != nil {
		panic(err)
	}
	fmt.Println(summary.Completed, "slots complete,", len(gaps), "gaps")
	fmt.Println("first report:", first)
	// Output:
	// 12 slots complete, 0 gaps
	// first report: 2026-03-01T00:00:00Z/PT5M
}
