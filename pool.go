package almanac

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/pooler"
	"github.com/almanacdev/almanac/internal/retry"
)

// Pooler says whether connections reach PostgreSQL through a connection
// pooler such as PgBouncer, and how it pools them.
type Pooler int

const (
	// PoolerAuto finds out: a connection whose backend key is not the
	// server's own goes through a pooler, taken to pool transactions (the
	// mode that needs the most care).
	PoolerAuto Pooler = iota
	// PoolerSession: direct connections, or a pooler that gives each
	// client one server session for as long as it is connected (which
	// works as a direct connection does).
	PoolerSession
	// PoolerTransaction: a pooler that hands server sessions out per
	// transaction. Statements must not rely on named prepared statements
	// (before PgBouncer 1.21), and LISTEN cannot work through it: lease
	// mode and locked mode work, wake-ups need a direct connection
	// (Options.ListenURL) or fall back to polling.
	PoolerTransaction
)

var poolerNames = [...]string{"auto", "session", "transaction"}

// String returns auto, session or transaction.
func (p Pooler) String() string {
	if p >= 0 && int(p) < len(poolerNames) {
		return poolerNames[p]
	}
	return fmt.Sprintf("Pooler(%d)", int(p))
}

// ErrPooler is returned when the pool reaches the database through a pooler
// in transaction mode with a configuration that fails there
// nondeterministically: named prepared statements (pgx's default).
var ErrPooler = errors.New("the pool's configuration does not work through a transaction pooler")

// PoolOptions configure NewPool. The zero value detects a pooler.
type PoolOptions struct {
	// MaxConns caps the pool's connections. Default: the URL's
	// pool_max_conns, else pgx's default (4, or the number of CPUs if
	// more).
	MaxConns int32
	// Pooler says whether connections go through a pooler. Default
	// PoolerAuto.
	Pooler Pooler
	// ConnectTimeout bounds each connection attempt when the URL sets no
	// connect_timeout. Default 10 s.
	ConnectTimeout time.Duration
}

// ConfigurePool adjusts the configuration of a pool of the caller's making
// for almanac: TCP keepalives, pings of idle connections, and cancellation
// that keeps a locked-mode transaction alive to record its outcome (see
// acquire.ConfigurePool). NewPool applies it.
func ConfigurePool(cfg *pgxpool.Config) { acquire.ConfigurePool(cfg) }

// NewPool opens a pool on url (a PostgreSQL URL or key=value string; empty
// reads the libpq PG* variables) configured for almanac and for the
// caller's own statements:
//
//   - TCP keepalives, cancellation that keeps connections, and pings of
//     idle connections, as acquire.ConfigurePool;
//   - through a pooler in transaction mode (detected, or said by
//     opts.Pooler), statements run without named prepared statements
//     (pgx's exec mode), unless the URL chooses a mode itself with
//     default_query_exec_mode. The cost, measured in BENCHMARKS.md, is a
//     parse per statement.
//
// It checks the database answers, retrying transient faults (a restarting
// or full server) until ctx ends. Errors never contain the URL, which may
// hold a password.
func NewPool(ctx context.Context, url string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: the database URL is malformed; expected e.g. postgres://user@localhost:5432/dbname", ErrInvalid)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = cmp.Or(opts.ConnectTimeout, 10*time.Second)
	}
	acquire.ConfigurePool(cfg)
	pooled := opts.Pooler == PoolerTransaction
	if opts.Pooler == PoolerAuto {
		err := retry.Do(ctx, func(ctx context.Context) error {
			conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			pooled, err = pooler.Behind(ctx, conn)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if pooled && !strings.Contains(url, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := retry.Do(ctx, pool.Ping); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkPool refuses, once per Client, a pool that reaches the database
// through a pooler (unless Options.Pooler says it pools sessions) with
// named prepared statements: through transaction pooling they fail at
// random, which is worse than failing at once with the remedy.
func (c *Client) checkPool(ctx context.Context) error {
	c.checked.Lock()
	defer c.checked.Unlock()
	if c.poolOK {
		return nil
	}
	cfg := c.pool.Config().ConnConfig
	if c.opts.Pooler == PoolerSession || !pooler.NamesStatements(cfg) {
		c.poolOK = true
		return nil
	}
	pooled := c.opts.Pooler == PoolerTransaction
	if !pooled {
		err := retry.Do(ctx, func(ctx context.Context) error {
			conn, err := c.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			pooled, err = pooler.Behind(ctx, conn.Conn())
			return err
		})
		if err != nil {
			return err
		}
	}
	if pooled {
		return fmt.Errorf("%w: it reaches the database through a pooler and prepares named statements; "+
			"open it with almanac.NewPool, or add default_query_exec_mode=exec to its URL (or set Options.Pooler to PoolerSession if the pooler pools sessions)", ErrPooler)
	}
	c.poolOK = true
	return nil
}
