package coverage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// pruneBatchSize bounds the events one transaction of PruneHistory
// deletes.
const pruneBatchSize = 10_000

// pruneBatch deletes up to $1 events older than the retention through the
// schema's prune_history function (migration 8): only the schema's owner
// may delete events, and the function, which runs as the owner, deletes
// nothing the retention keeps. It reads them by their row addresses, with
// SKIP LOCKED so that several pruners (every scheduler prunes) share the
// work instead of queueing behind each other.
const pruneBatch = `SELECT {{schema}}.prune_history($1)`

const pruneCount = `SELECT count(*) FROM {{schema}}.slot_event
	WHERE at < now() - (SELECT history_retention FROM {{schema}}.settings)`

// PruneHistory deletes the history events (slot_event) of schema (""
// means "almanac") older than the schema's retention,
// settings.history_retention (90 days unless changed with SQL), measured on
// the database clock, and returns how many it deleted (with dryRun,
// would delete; the other options do not apply). It works in transactions
// of at most 10,000 events, so it never holds many locks for long; if one
// fails, the batches before it stay deleted. Any number of processes may
// prune at once: started clients do it every sweep, `almanac history
// --prune` on demand. Unlike every other operation it is not scoped to one
// series: old events are found by time across the schema.
func PruneHistory(ctx context.Context, db DB, schema string, opts WriteOptions) (int64, error) {
	return pruneHistory(ctx, db, schema, opts.DryRun, pruneBatchSize)
}

// pruneHistory is PruneHistory in batches of batchSize events.
func pruneHistory(ctx context.Context, db DB, schema string, dryRun bool, batchSize int) (int64, error) {
	if schema == "" {
		schema = sqlschema.Default
	}
	if err := sqlschema.Check(schema); err != nil {
		return 0, err
	}
	var total int64
	for {
		var n int64
		err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, writeSettings); err != nil {
				return err
			}
			if dryRun {
				return tx.QueryRow(ctx, sqlschema.Render(pruneCount, schema)).Scan(&n)
			}
			return tx.QueryRow(ctx, sqlschema.Render(pruneBatch, schema), batchSize).Scan(&n)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("prune history: %w", err)
		}
		if dryRun || n < int64(batchSize) {
			return total, nil
		}
	}
}
