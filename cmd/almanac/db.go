package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/migrations"
)

// connectTimeout bounds each connection attempt when the URL sets none, so
// an unreachable database fails in seconds with exit 3, not after TCP's
// minutes-long retries.
const connectTimeout = 5 * time.Second

// connect opens the pool on the configured database and checks it answers.
// An empty URL lets pgx read the libpq PG* variables, like psql does.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if a.pool != nil {
		return a.pool, nil
	}
	cfg, err := pgxpool.ParseConfig(a.databaseURL)
	if err != nil {
		// The URL may hold a password: name where it came from, not its text.
		return nil, usageError(fmt.Errorf("database URL from %s is malformed; expected e.g. postgres://user@localhost:5432/dbname", a.urlFrom))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.MaxConns = max(8, a.poolSize)
	acquire.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, unavailableError(fmt.Errorf("cannot reach the database %s (from %s): %s; start PostgreSQL or point --database-url or DATABASE_URL at it",
			describeTarget(cfg.ConnConfig.Config), a.urlFrom, connectCause(err)))
	}
	a.pool = pool
	return pool, nil
}

// connectMigrated connects and checks the schema is migrated (exit 3 with
// the command to run otherwise).
func (a *app) connectMigrated(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := migrations.Require(ctx, pool, a.schema); err != nil {
		return nil, unavailableError(err)
	}
	return pool, nil
}

func describeTarget(cfg pgconn.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// connectCause keeps the useful part of a connection error: pgx's text
// repeats the address and wraps several layers.
func connectCause(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}
