package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
)

// connectTimeout bounds each connection attempt when the URL sets none, so
// an unreachable database fails in seconds with exit 3, not after TCP's
// minutes-long retries.
const connectTimeout = 5 * time.Second

// connect opens the pool on the configured database and checks it answers.
// An empty URL lets pgx read the libpq PG* variables, like psql does. A
// server that is unreachable, full or starting up is tried again for the
// retry budget (--retry-timeout) before the command gives up with exit 3;
// one that refuses the login gives up at once. The message names the cause.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if a.pool != nil {
		return a.pool, nil
	}
	cfg, err := pgxpool.ParseConfig(a.databaseURL)
	if err != nil {
		// The URL may hold a password: name where it came from, not its text.
		return nil, usageError(fmt.Errorf("database URL from %s is malformed; expected e.g. postgres://user@localhost:5432/dbname", a.urlFrom))
	}
	// Connecting is bounded by the retry budget, like every database call.
	connectCtx, cancel := context.WithTimeout(ctx, a.retryTimeout)
	defer cancel()
	pool, err := almanac.NewPool(connectCtx, a.databaseURL, almanac.PoolOptions{
		MaxConns: max(2, a.poolSize), Pooler: a.pooler, ConnectTimeout: connectTimeout,
	})
	if err != nil {
		return nil, unavailableError(fmt.Errorf("cannot reach the database %s (from %s): %s",
			describeTarget(cfg.ConnConfig.Config), a.urlFrom, connectCause(err)))
	}
	a.pool = pool
	return pool, nil
}

// connectClient connects and returns the almanac Client every command
// works through, with the global flags applied: schema, pooler, LISTEN
// connection, retry budget, the actor recorded in the slots' history and
// the log.
func (a *app) connectClient(ctx context.Context) (*almanac.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	pool, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	actor := a.actor
	if actor == "" {
		actor = a.operator()
	}
	a.client, err = almanac.New(pool, almanac.Options{
		Schema: a.schema, Pooler: a.pooler, ListenURL: a.listenURL, RetryBudget: a.retryTimeout, Actor: actor,
		Logger: a.logger(), Concurrency: a.concurrency, ShutdownTimeout: a.shutdownTimeout, MeterProvider: a.meters,
	})
	return a.client, err
}

// connectMigrated connects and checks the schema is migrated (exit 3 with
// the command to run otherwise).
func (a *app) connectMigrated(ctx context.Context) (*almanac.Client, error) {
	c, err := a.connectClient(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.RequireMigrated(ctx); err != nil {
		return nil, unavailableError(err)
	}
	return c, nil
}

func describeTarget(cfg pgconn.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// connectCause says why a connection failed and what to do, keeping the
// useful part of the error: pgx's text repeats the address and wraps
// several layers.
func connectCause(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "53300":
			return "the server is full (" + pgErr.Message + "); raise max_connections, or lower the connections other clients and --workers use"
		case pgErr.Code == "57P03":
			return "the server is starting up, shutting down or in recovery (" + pgErr.Message + "); retry once it is up"
		case strings.HasPrefix(pgErr.Code, "28"):
			return "the login was refused (" + pgErr.Message + "); check the user and password in --database-url, DATABASE_URL or PGUSER/PGPASSWORD"
		case pgErr.Code == "3D000":
			return pgErr.Message + "; create it or fix the database name"
		}
		return pgErr.Message
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error() + "; start PostgreSQL or point --database-url or DATABASE_URL at it"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out; check that the server is up and reachable"
	}
	return err.Error()
}
