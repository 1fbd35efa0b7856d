// Package pooler tells whether a connection goes through a connection
// pooler such as PgBouncer.
//
// A pooler answers the client's startup itself and hands it a backend key
// of its own making (it must, to route cancel requests), so the process id
// the client was given differs from the one the server reports for the
// session. A direct connection gets the server's own. The check costs one
// round trip and runs in the simple protocol, so it leaves no prepared
// statement behind on a server connection the pooler shares.
package pooler

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Behind reports whether conn reaches the server through a pooler.
func Behind(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid)
	if err != nil {
		return false, err
	}
	return pid != conn.PgConn().PID(), nil
}

// NamesStatements reports whether a connection configured with cfg
// prepares named statements, which a pooler in transaction mode before
// PgBouncer 1.21 cannot keep: the next transaction may run on another
// server connection, where the statement is missing (26000) or another
// client's is in the way (42P05).
func NamesStatements(cfg *pgx.ConnConfig) bool {
	return cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
}
