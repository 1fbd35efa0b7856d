package coverage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WithTx returns a client that works inside tx, the caller's transaction,
// instead of in transactions of its own: what it writes commits or rolls
// back with the caller's writes, and the wake-up it sends is delivered when
// (and only if) tx commits. "Insert the late data and re-open its window"
// is then atomic.
//
// Inside tx the client differs in three ways. A range is not split into
// transactions of ChunkSize slots: it all belongs to tx, so keep ranges
// modest. Faults are not retried (tx itself is lost with its connection):
// the caller retries its transaction. Each operation runs in a savepoint,
// so a failed one leaves tx usable, and a dry run is rolled back to it. The
// locks an operation takes (the rows it changes, and for Materialize, Skip
// and Reopen the series' row, which serializes materializers and
// compaction) are held until tx ends.
//
// Reads (Gaps, Status, Counts, History) see what tx sees, its own writes
// included.
func (c *Client) WithTx(tx pgx.Tx) *Client {
	cc := *c
	cc.tx = tx
	return &cc
}

// inCallerTx runs fn in a savepoint of the caller's transaction, with
// settings applied for fn and the caller's own settings put back after it:
// the caller's transaction keeps its timeouts, and its later plain SQL is
// neither taken for almanac's (almanac.engine) nor recorded as the
// client's actor's (almanac.actor).
func (c *Client) inCallerTx(ctx context.Context, settings string, rollback bool, fn func(pgx.Tx) error) error {
	sp, err := c.tx.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	var timeout, lockTimeout, jit, engine, actor, seqScan, bitmapScan string
	if err := sp.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
		current_setting('jit'), coalesce(current_setting('almanac.engine', true), ''),
		coalesce(current_setting('almanac.actor', true), ''), current_setting('enable_seqscan'), current_setting('enable_bitmapscan')`).
		Scan(&timeout, &lockTimeout, &jit, &engine, &actor, &seqScan, &bitmapScan); err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, settings); err != nil {
		return err
	}
	if err := fn(sp); err != nil {
		return err
	}
	if rollback {
		return sp.Rollback(ctx) // the settings go with it
	}
	if _, err := sp.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true),
		set_config('jit', $3, true), set_config('almanac.engine', $4, true), set_config('almanac.actor', $5, true),
		set_config('enable_seqscan', $6, true), set_config('enable_bitmapscan', $7, true)`,
		timeout, lockTimeout, jit, engine, actor, seqScan, bitmapScan); err != nil {
		return fmt.Errorf("restore the transaction's settings: %w", err)
	}
	return sp.Commit(ctx)
}
