package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// DATABASE_URL, or the PG* variables when it is empty. NewPool adds keepalives and
	// detects PgBouncer; 12 connections = the default 10 workers + 2 kept for completions.
	pool, err := almanac.NewPool(ctx, os.Getenv("DATABASE_URL"), almanac.PoolOptions{MaxConns: 12})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := run(ctx, pool); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, pool *pgxpool.Pool) error {
	client, err := almanac.New(pool, almanac.Options{Schema: os.Getenv("ALMANAC_SCHEMA")}) // default "almanac"
	if err != nil {
		return err
	}
	if _, err := client.Migrate(ctx); err != nil { // safe to run from every instance
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS report (slot text PRIMARY KEY, rows bigint)`); err != nil {
		return err
	}
	// Every five-minute window, one minute after it ends, exactly once.
	windows, err := client.Series(ctx, "report", "PT5M", almanac.SeriesOptions{TimeZone: "UTC"})
	if err != nil {
		return err
	}
	err = client.Register(almanac.Job{
		Series: windows,
		Policy: almanac.Policy{Lag: time.Minute},
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			// Commits together with the slot's COMPLETE, or not at all.
			_, err := tx.Exec(ctx, `INSERT INTO report (slot, rows) VALUES ($1, 42)`, s.String())
			log.Printf("report %s: attempt %d, fence %d", s, s.Attempt, s.Fence)
			return err
		},
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	log.Print("reporting every 5 minutes; look: almanac status report --interval PT5M, or almanac serve")
	<-ctx.Done()
	return client.Stop(context.Background())
}
