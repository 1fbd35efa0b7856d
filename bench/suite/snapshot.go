package suite

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// holdSnapshot begins a REPEATABLE READ transaction on a connection of its
// own and takes its snapshot, as a long job, report or backup does
// elsewhere in a cluster: until release, no row version that is newer can
// be removed, and no index entry pointing to one can be marked dead.
func holdSnapshot(ctx context.Context, pool *pgxpool.Pool) (release func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold a snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err == nil {
		// A repeatable-read transaction takes its snapshot at its first
		// statement.
		_, err = tx.Exec(ctx, "SELECT 1 FROM pg_catalog.pg_class LIMIT 1")
	}
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("hold a snapshot: %w", err)
	}
	return func() {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		conn.Release()
	}, nil
}
