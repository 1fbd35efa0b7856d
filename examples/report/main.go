// Command report writes, for every five-minute window, a report counting the
// sensor readings of that window, exactly once, one minute after the window
// ends. Run as many instances as you like; each window is reported once.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/report
//	DATABASE_URL=... go run ./examples/report -once   # report what is due, then exit
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
)

func main() {
	once := flag.Bool("once", false, "report every due window, then exit")
	schema := flag.String("schema", "almanac_example", "schema for almanac's and the example's tables")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := run(ctx, pool, *schema, *once, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// hours of synthetic readings, and of windows to report.
const hours = 3

func run(ctx context.Context, pool *pgxpool.Pool, schema string, once bool, out io.Writer) error {
	client, err := almanac.New(pool, almanac.Options{
		Schema: schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
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
	if once {
		summary, err := client.Drain(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "reported %d windows\n", summary.Completed)
		return nil
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "reporting every five-minute window one minute after it ends; Ctrl-C to stop")
	<-ctx.Done()
	return client.Stop(context.Background())
}
