// Package pgversion reads the PostgreSQL server's version: migrations
// checks it before applying the schema, and the client reports it.
package pgversion

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/retry"
)

// Server is the PostgreSQL server a database belongs to.
type Server struct {
	// Version is the version as the server reports it (server_version),
	// e.g. "16.4" or "15.14 (Debian 15.14-0+deb12u1)".
	Version string
	// Num is the version as a number (server_version_num), e.g. 160004.
	Num int
}

// DB is what Of reads through: a pool, a connection or a transaction.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Of returns the version of db's server, retrying transient faults within
// ctx's retry budget.
func Of(ctx context.Context, db DB) (Server, error) {
	var s Server
	err := retry.Do(ctx, func(ctx context.Context) error {
		// Read committed whatever the role's default: a serializable one
		// could fail a read that runs beside migrations.
		tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		return tx.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&s.Version, &s.Num)
	})
	return s, err
}
