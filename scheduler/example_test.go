package scheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/almanactest"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/scheduler"
	"github.com/almanacdev/almanac/slot"
)

// Two jobs on one scheduler: a locked-mode job whose handler writes in the
// slot's transaction, and a lease-mode job for longer work, held by a lease
// that the scheduler renews while the handler runs and completes when it
// returns nil. RunOnce materializes the jobs' ranges and works them until
// every slot is finished.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t) // in a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), schema "almanac"
	if _, err := migrations.Up(ctx, pool, schema); err != nil {
		panic(err)
	}
	hourly, _ := slot.NewSeries("hourly_totals", slot.MustParseInterval("PT1H"), time.UTC, time.Time{})
	daily, _ := slot.NewSeries("daily_export", slot.MustParseInterval("P1D"), time.UTC, time.Time{})
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

	s := scheduler.New(pool, scheduler.Options{Schema: schema})
	err := s.Add(scheduler.Job{
		Series: hourly, Start: from, End: from.AddDate(0, 0, 1),
		Handler: func(ctx context.Context, tx pgx.Tx, sl acquire.Slot) error {
			return nil // the hour's totals, written in tx
		},
	})
	if err != nil {
		panic(err)
	}
	err = s.Add(scheduler.Job{
		Series: daily, Start: from, End: from.AddDate(0, 0, 7), Mode: scheduler.Lease,
		LeaseHandler: func(ctx context.Context, l *acquire.Lease) error {
			return nil // export the day; the scheduler completes the lease
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := s.RunOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(summary[acquire.Completed], "slots complete")
	// Output: 31 slots complete
}
