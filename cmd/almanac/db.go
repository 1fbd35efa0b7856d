package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/dbtarget"
	"github.com/almanacdev/almanac/internal/retry"
)

// connectTimeout bounds each connection attempt when the URL sets none, so
// an unreachable database fails in seconds with exit 3, not after TCP's
// minutes-long retries.
const connectTimeout = 3 * time.Second

// connect opens the pool on the configured database (see dbtarget) and
// checks it answers. A one-shot command gives up at once, with exit 3 and
// what to do, when nothing listens at the address (refused, unknown host,
// no answer within connectTimeout): a person is waiting. A server that is
// full or starting up is tried again for the retry budget
// (--retry-timeout), and so is everything for the commands that log
// (almanac run, almanac serve), which should ride out a restart; one that
// refuses the login gives up at once. The message names the database and
// the cause.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if a.pool != nil {
		return a.pool, nil
	}
	cfg, err := pgxpool.ParseConfig(a.databaseURL)
	if err != nil {
		// The URL may hold a password: name where it came from, not its text.
		return nil, usageError(fmt.Errorf("database URL from %s is malformed; expected e.g. postgres://user@localhost:5432/dbname", a.urlFrom))
	}
	a.target = dbtarget.Describe(&cfg.ConnConfig.Config)
	fail := func(err error) error {
		return unavailableError(fmt.Errorf("cannot reach the database %s (%s): %s", a.target, a.source(), connectCause(err)))
	}
	if !a.logs {
		probe := cfg.ConnConfig.Copy()
		if probe.ConnectTimeout == 0 {
			probe.ConnectTimeout = connectTimeout
		}
		conn, err := pgx.ConnectConfig(ctx, probe)
		if err == nil {
			_ = conn.Close(ctx)
		} else if unreachable(err) {
			return nil, fail(err)
		}
	}
	// Connecting is bounded by the retry budget, like every database call;
	// the first retry says so, rather than leave the budget silent.
	connectCtx, cancel := context.WithTimeout(ctx, a.retryTimeout)
	defer cancel()
	connectCtx = retry.OnRetry(connectCtx, func(err error, attempt int, wait time.Duration) {
		if attempt == 1 {
			a.notice("almanac: the database does not answer; retrying within --retry-timeout before exiting with status 3",
				"database", a.target, "cause", connectCause(err), "retry_timeout", a.retryTimeout)
		}
	})
	pool, err := almanac.NewPool(connectCtx, a.databaseURL, almanac.PoolOptions{
		MaxConns: max(2, a.poolSize), Pooler: a.pooler, ConnectTimeout: connectTimeout,
	})
	if err != nil {
		return nil, fail(err)
	}
	a.pool = pool
	return pool, nil
}

// notice writes one line on stderr about what the command is doing: a log
// record for the commands that log, else JSON when the logs or the output
// are, else text ("msg (key value, ...)").
func (a *app) notice(msg string, attrs ...any) {
	switch {
	case a.logs:
		a.logger().Warn(msg, attrs...)
	case a.logFormat == "json":
		a.jsonLogger(a.stderr).Warn(msg, attrs...)
	default:
		var parts []string
		for i := 0; i+1 < len(attrs); i += 2 {
			parts = append(parts, fmt.Sprintf("%v %v", attrs[i], attrs[i+1]))
		}
		fmt.Fprintf(a.stderr, "%s (%s)\n", msg, strings.Join(parts, ", "))
	}
}

// source says where the database URL came from, for messages: "from
// DATABASE_URL", "the default database".
func (a *app) source() string {
	if strings.HasPrefix(a.urlFrom, "the ") {
		return a.urlFrom
	}
	return "from " + a.urlFrom
}

// unreachable reports whether err says nothing answers at the database's
// address (as opposed to a server that answers with an error).
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED)
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
		if errors.Is(err, almanac.ErrNotMigrated) {
			return nil, unavailableError(a.inDatabase(err))
		}
		return nil, unavailableError(err)
	}
	return c, nil
}

// inDatabase says which database err is about: "schema not migrated in
// postgres@127.0.0.1:5432/postgres: ...", so that nobody migrates another.
func (a *app) inDatabase(err error) error {
	text := err.Error()
	if head, rest, ok := strings.Cut(text, ": "); ok {
		return fmt.Errorf("%s in %s: %s%w", head, a.target, rest, errorsOnly{err})
	}
	return fmt.Errorf("%w (database %s)", err, a.target)
}

// errorsOnly wraps an error for errors.Is and errors.As and prints nothing,
// so that a message can be rephrased and still match its sentinel.
type errorsOnly struct{ err error }

func (errorsOnly) Error() string   { return "" }
func (e errorsOnly) Unwrap() error { return e.err }

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
		return opErr.Err.Error() + "; start PostgreSQL there, or point DATABASE_URL (or --database-url) at the server to use"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within the connect timeout; check that the server is up and reachable, or point DATABASE_URL (or --database-url) at the server to use"
	}
	return err.Error()
}
