package coverage_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/almanactest"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// A backfill: make sure March exists, list what is missing, and redo the
// days whose input arrived late.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t) // in a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), schema "almanac"
	if _, err := migrations.Up(ctx, pool, schema); err != nil {
		panic(err)
	}
	// In a program: `almanac series add billing --interval P1D --tz Europe/Berlin`.
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema}.Sanitize()+`.series (name, "interval", time_zone, origin)
		VALUES ('billing', 'P1D', 'Europe/Berlin', '2000-01-01T00:00:00+01:00')`)
	if err != nil {
		panic(err)
	}

	berlin, _ := slot.LoadZone("Europe/Berlin")
	day, _ := slot.ParseInterval("P1D")
	grid, _ := slot.NewSeries("billing", day, berlin, time.Time{})
	cov, err := coverage.New(ctx, pool, grid, coverage.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, berlin)
	to := from.AddDate(0, 1, 0)
	if _, err := cov.Materialize(ctx, from, from.AddDate(0, 0, 20), coverage.WriteOptions{}); err != nil {
		panic(err)
	}
	for gap, err := range cov.Gaps(ctx, from, to) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("missing: [%s, %s), %d slots\n", slot.FormatTime(gap.Start), slot.FormatTime(gap.End), gap.Slots)
	}
	res, err := cov.Materialize(ctx, from, to, coverage.WriteOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("materialized %d of %d days\n", res.Inserted, res.Slots)

	// Workers complete the days (here: plain SQL), then late invoices arrive
	// for three of them.
	if _, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "slot"}.Sanitize()+` SET status = 'COMPLETE'`); err != nil {
		panic(err)
	}
	reopened, err := cov.Reopen(ctx, from.AddDate(0, 0, 9), from.AddDate(0, 0, 12), coverage.WriteOptions{Reason: "late invoices"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("reopened %d days; %d in flight left alone\n", reopened.Changed, len(reopened.Held))
	// Output:
	// missing: [2026-03-21T00:00:00+01:00, 2026-04-01T00:00:00+02:00), 11 slots
	// materialized 11 of 31 days
	// reopened 3 days; 0 in flight left alone
}
