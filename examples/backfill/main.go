// Command backfill shows a backfill: late readings arrive for an hour that
// was already reported, the hour is re-opened, and its twelve five-minute
// reports are recomputed, once each, by the same workers.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/backfill
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
)

func main() {
	schema := flag.String("schema", "almanac_example", "schema for almanac's and the example's tables")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := run(ctx, pool, *schema, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const hours = 3

func run(ctx context.Context, pool *pgxpool.Pool, schema string, out io.Writer) error {
	client, err := almanac.New(pool, almanac.Options{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := client.Migrate(ctx); err != nil {
		return err
	}
	now := time.Now()
	if err := setup(ctx, pool, schema, hours, now); err != nil {
		return err
	}
	series, err := client.Series(ctx, "sensor_report", "PT5M", almanac.SeriesOptions{})
	if err != nil {
		return err
	}
	if err := client.Register(reportJob(series, schema, hours, now)); err != nil {
		return err
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "reported %d windows\n", summary.Completed)

	// Late data: a sensor that was offline delivers an hour of readings
	// from two hours ago.
	lateFrom := now.Add(-2 * time.Hour).Truncate(time.Hour)
	lateTo := lateFrom.Add(time.Hour)
	// The late readings and the re-open of their windows commit together:
	// if either fails, neither happened, so no window can be left reported
	// without the data it should have counted. Idle workers are woken when
	// the transaction commits.
	var late int64
	var reopened almanac.WriteResult
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		s := pgx.Identifier{schema}.Sanitize()
		tag, err := tx.Exec(ctx, `INSERT INTO `+s+`.sensor_reading
			SELECT t, 9, 42 FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 second', interval '30 seconds') t`,
			lateFrom, lateTo)
		if err != nil {
			return err
		}
		late = tag.RowsAffected()
		reopened, err = client.ReopenTx(ctx, tx, series, lateFrom, lateTo, almanac.WriteOptions{Reason: "late data from sensor 9"})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "late data: %d readings for [%s, %s)\n", late, lateFrom.UTC().Format(time.RFC3339), lateTo.UTC().Format(time.RFC3339))

	status, err := client.Status(ctx, series, lateFrom, lateTo)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "re-opened %d windows: %d available, %d complete\n", reopened.Changed, status.Available, status.Complete)

	summary, err = client.Drain(ctx)
	if err != nil {
		return err
	}
	status, err = client.Status(ctx, series, lateFrom, lateTo)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "recomputed %d windows: %d complete, %.0f%% covered, %d missing\n",
		summary.Completed, status.Complete, status.Covered(), status.Missing)
	return nil
}
