package coverage_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/slot"
)

// A backfill: make sure March exists, list what is missing, and redo the
// days whose input arrived late.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	berlin, _ := slot.LoadZone("Europe/Berlin")
	grid, _ := slot.NewSeries("billing", slot.MustParseInterval("P1D"), berlin, time.Time{})
	cov, err := coverage.New(ctx, pool, grid, coverage.Options{}) // registered with `almanac series add`
	if err != nil {
		log.Fatal(err)
	}
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, berlin)
	to := from.AddDate(0, 1, 0)

	if _, err := cov.Materialize(ctx, from, to, coverage.MaterializeOptions{}); err != nil {
		log.Fatal(err)
	}
	for gap, err := range cov.Gaps(ctx, from, to) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("missing: [%s, %s), %d slots\n", slot.FormatTime(gap.Start), slot.FormatTime(gap.End), gap.Slots)
	}
	res, err := cov.Reopen(ctx, from.AddDate(0, 0, 9), from.AddDate(0, 0, 12), coverage.ReopenOptions{Reason: "late invoices"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("reopened %d days; %d in flight left alone\n", res.Reopened, len(res.Held))
}
