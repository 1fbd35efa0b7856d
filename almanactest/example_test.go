package almanactest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/almanactest"
)

// A test of a job: drain a day of hourly slots on a schema of the test's
// own, then check them. In a test function t is the *testing.T; the
// package's TestMain calls almanactest.Main.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB() // in a test: t *testing.T

	client := almanactest.Client(t, almanac.Options{})
	series, err := client.Series(ctx, "hourly_totals", "PT1H", almanac.SeriesOptions{TimeZone: "UTC"})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	err = client.Register(almanac.Job{
		Series: series,
		From:   day,
		To:     day.Add(24 * time.Hour),
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			if s.Start.Hour() == 3 {
				return almanac.Skip("maintenance window")
			}
			return nil // the job's work, in tx
		}})
	if err != nil {
		t.Fatal(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}

	almanactest.RequireStatus(t, client, series, day, almanac.StatusComplete)
	almanactest.RequireStatus(t, client, series, day.Add(3*time.Hour), almanac.StatusSkip)
	almanactest.RequireStatus(t, client, series, day.Add(24*time.Hour), almanactest.Missing)
	fmt.Println(summary.Completed, "complete,", summary.Skipped, "skipped")
	// Output: 23 complete, 1 skipped
}

// A test of one handler on one slot: Work runs it as a worker would and
// returns what it recorded.
func ExampleWork() {
	t := almanactest.ExampleTB() // in a test: t *testing.T
	schema := almanactest.Schema(t)
	client := almanactest.Client(t, almanac.Options{Schema: schema})
	series, err := client.Series(context.Background(), "daily_report", "P1D", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	holiday := time.Date(2025, 12, 25, 12, 0, 0, 0, series.Location())
	job := almanac.Job{Series: series, Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
		if s.Start.Month() == time.December && s.Start.Day() == 25 {
			return almanac.Skip("holiday: no report")
		}
		return nil
	}}

	summary := almanactest.Work(t, almanac.Options{Schema: schema}, job, holiday)
	fmt.Println(summary.Skipped, "skipped")
	almanactest.RequireStatus(t, client, series, holiday, almanac.StatusSkip)
	// Output: 1 skipped
}
