package coverage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// DefaultPruneBatch is the default of PruneOptions.BatchSize.
const DefaultPruneBatch = 10_000

// PruneOptions tune PruneHistory. The zero value prunes the default
// schema.
type PruneOptions struct {
	// Schema holding almanac's tables. Default "almanac".
	Schema string
	// BatchSize bounds the events one transaction deletes. Default
	// DefaultPruneBatch (10,000).
	BatchSize int
	// DryRun counts what would be deleted, and deletes nothing.
	DryRun bool
}

// pruneBatch deletes up to $1 events older than the retention, by their
// row addresses (a TID scan). SKIP LOCKED lets several pruners (every
// scheduler prunes) share the work instead of queueing behind each other.
// now() is the start of the batch's transaction on the database clock; being
// stable, unlike clock_timestamp(), it lets the block-range index on the
// time find the old rows.
const pruneBatch = `DELETE FROM {{schema}}.slot_event WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM {{schema}}.slot_event
	WHERE at < now() - (SELECT history_retention FROM {{schema}}.settings)
	LIMIT $1 FOR UPDATE SKIP LOCKED))`

const pruneCount = `SELECT count(*) FROM {{schema}}.slot_event
	WHERE at < now() - (SELECT history_retention FROM {{schema}}.settings)`

// PruneHistory deletes the history events (slot_event) older than the
// schema's retention, settings.history_retention (90 days unless changed
// with SQL), measured on the database clock, and returns how many it
// deleted (with DryRun, would delete). It works in transactions of at most
// BatchSize events, so it never holds many locks for long; if one fails,
// the batches before it stay deleted. Any number of processes may prune at
// once: schedulers do it every sweep interval, `almanac history --prune` on
// demand. Unlike every other operation it is not scoped to one series: old
// events are found by time across the schema.
func PruneHistory(ctx context.Context, db DB, opts PruneOptions) (int64, error) {
	if opts.Schema == "" {
		opts.Schema = sqlschema.Default
	}
	if err := sqlschema.Check(opts.Schema); err != nil {
		return 0, err
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultPruneBatch
	}
	var total int64
	for {
		var n int64
		err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, writeSettings); err != nil {
				return err
			}
			if opts.DryRun {
				return tx.QueryRow(ctx, sqlschema.Render(pruneCount, opts.Schema)).Scan(&n)
			}
			tag, err := tx.Exec(ctx, sqlschema.Render(pruneBatch, opts.Schema), opts.BatchSize)
			n = tag.RowsAffected()
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("prune history: %w", err)
		}
		if opts.DryRun || n < int64(opts.BatchSize) {
			return total, nil
		}
	}
}
