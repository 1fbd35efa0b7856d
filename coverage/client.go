package coverage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// defaultChunkSize is the default of Options.ChunkSize.
const defaultChunkSize = 50_000

// DB is what a Client needs from the database: a *pgxpool.Pool or a
// *pgx.Conn. Reads run as single statements; every write runs in
// transactions the Client begins itself (read committed, whatever the
// session's default), so it never joins a caller's transaction.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// querier runs the statements of one step: a DB, or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options configure a Client. The zero value is usable.
type Options struct {
	// Schema holding almanac's tables. Default "almanac".
	Schema string
	// ChunkSize bounds the slots one transaction writes, so a backfill of
	// millions of slots holds locks and a snapshot for about a second at a
	// time, not for minutes. Default 50,000.
	ChunkSize int
	// Actor names who works through this client (a person as user@host, a
	// program), recorded in the history (slot_event.actor) of the slots it
	// re-opens, skips or retries. At most 200 bytes of valid UTF-8 without
	// control characters. Default: the database role the session logged in
	// as.
	Actor string
}

// Client works on the coverage of one registered series. It is safe for
// concurrent use, and any number of Clients, in any number of processes, may
// work on the same series at once.
type Client struct {
	db       DB
	grid     slot.Series
	schema   string
	name     string
	interval string
	chunk    int64
	actor    *string     // nil: the session's role
	sql      *statements // shared by the clients of one schema (statementsFor)
	// runsInSQL is set when the database can compute the slots of a chunk
	// from runs: the interval is fixed, and a chunk's offsets from the
	// start of a run stay below 2^53 microseconds (285 years), where float8
	// arithmetic is exact.
	runsInSQL bool
	// tx is the caller's transaction the client works in (WithTx), or nil.
	tx pgx.Tx
}

// New returns a Client for the series of grid, which must be registered with
// the same zone and origin: otherwise New returns an error wrapping
// almanac.ErrUnknownSeries or almanac.ErrSeriesConflict (the root package
// names the errors every layer shares). An invalid Options.Schema is an
// error wrapping almanac.ErrInvalid.
func New(ctx context.Context, db DB, grid slot.Series, opts Options) (*Client, error) {
	if opts.Schema == "" {
		opts.Schema = sqlschema.Default
	}
	if err := sqlschema.Check(opts.Schema); err != nil {
		return nil, err
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = defaultChunkSize
	}
	if err := input.CheckActor(opts.Actor); err != nil {
		return nil, err
	}
	def, err := seriesdb.Lookup(ctx, db, opts.Schema, grid.Name(), grid.Interval())
	if err != nil {
		return nil, err
	}
	if def.Grid.Location().String() != grid.Location().String() || !def.Grid.Origin().Equal(grid.Origin()) {
		return nil, fmt.Errorf("%w: %s is registered as %s", seriesdb.ErrSeriesConflict, grid, def.Grid)
	}
	iv := grid.Interval()
	var actor *string
	if opts.Actor != "" {
		actor = &opts.Actor
	}
	return &Client{
		db: db, grid: def.Grid, schema: opts.Schema, actor: actor,
		name: grid.Name(), interval: iv.String(),
		chunk: int64(opts.ChunkSize), sql: statementsFor(opts.Schema),
		runsInSQL: iv.Fixed() && iv.Clock().Microseconds() <= (1<<53)/int64(opts.ChunkSize+1),
	}, nil
}

// checkRange validates [from, to) and returns it with its number of slots.
// Slots start on whole microseconds, so bounds finer than that are rounded
// up: the range keeps the same slots, and the database, which stores
// microseconds, compares them exactly. Errors wrap slot.ErrInvalid.
func (c *Client) checkRange(from, to time.Time) (time.Time, time.Time, int64, error) {
	from, to = ceilMicro(from), ceilMicro(to)
	n, err := c.grid.Count(from, to)
	return from, to, n, err
}

func ceilMicro(t time.Time) time.Time {
	if d := t.Truncate(time.Microsecond); !d.Equal(t) {
		return d.Add(time.Microsecond)
	}
	return t
}

// Transaction settings. Role defaults may be hostile (a short
// statement_timeout, a lock_timeout, serializable isolation), so every write
// transaction states what it relies on. Writes also mark the transaction as
// almanac's own (almanac.engine), so the slot table's plain-SQL triggers
// leave them alone: they record history and wake workers themselves.
//
// JIT compilation is off: the planner cannot estimate how many rows a
// range given as a parameter holds, over-estimates, and JIT-compiles
// statements that then take milliseconds to run (measured: 28 ms of
// compilation for a 0.3 ms listing statement).
const (
	// readSettings are for gap searches.
	readSettings = `SET LOCAL statement_timeout = 0; SET LOCAL jit = off`
	// writeSettings let one chunk run as long as it needs and wait for
	// another materializer's chunk (bounded by ChunkSize) to commit.
	writeSettings = `SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; SET LOCAL jit = off; SET LOCAL almanac.engine = on`
	// noWaitSettings are for chunks that lock rows with SKIP LOCKED and so
	// never wait on a row; a lock wait there means DDL on the table, and an
	// error beats hanging behind it.
	noWaitSettings = `SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = '2s'; SET LOCAL jit = off; SET LOCAL almanac.engine = on`
	// inSlotOrder, added to the settings of the operations that change
	// many slots (Reopen, Retry, Skip), makes their updates read the rows
	// through the primary key: the slot table's trigger writes each row's
	// event as the update reaches it, and the history's block-range index
	// stays selective only if an operation's events come in slot order. A
	// sequential or bitmap scan reaches them in the order of the table.
	inSlotOrder = `; SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off`
)

// inTx runs fn in a read-committed transaction with settings applied and
// the client's actor named for the history's trigger (setActor), and
// commits, or rolls back when fn fails or rollback is set (a dry run).
func (c *Client) inTx(ctx context.Context, settings string, rollback bool, fn func(pgx.Tx) error) error {
	return c.runTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, settings, rollback, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, c.sql.setActor, c.actor); err != nil {
			return err
		}
		return fn(tx)
	})
}

// inSnapshot runs fn in a read-only transaction that sees one snapshot.
func (c *Client) inSnapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	return c.runTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, readSettings, true, fn)
}

// runTx runs fn in a transaction with opts and settings, and commits, or
// rolls back when fn fails or rollback is set (a dry run, a read). The
// whole transaction is repeated after a transient fault, so fn must not
// accumulate anything across calls. A COMMIT whose connection is lost is
// not repeated blindly: the transaction's id tells whether it committed.
func (c *Client) runTx(ctx context.Context, opts pgx.TxOptions, settings string, rollback bool, fn func(pgx.Tx) error) error {
	if c.tx != nil {
		return c.inCallerTx(ctx, settings, rollback, fn)
	}
	return retry.Do(ctx, func(ctx context.Context) error {
		tx, err := c.db.BeginTx(ctx, opts)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, settings); err != nil {
			return err
		}
		var xid int64
		if !rollback {
			if err := tx.QueryRow(ctx, `SELECT `+retry.CurrentXact).Scan(&xid); err != nil {
				return err
			}
		}
		if err := fn(tx); err != nil {
			return err
		}
		if rollback {
			return tx.Rollback(ctx)
		}
		err = tx.Commit(ctx)
		if err != nil && retry.MayHaveCommitted(ctx, err) {
			if committed, cerr := retry.Committed(ctx, c.db, xid); cerr == nil && committed {
				return nil
			}
		}
		return err
	})
}

// lockSeries serializes the writers that insert or delete slots of this
// series (Materialize, Skip, Reopen's restore, Compact) until the
// transaction ends. Each re-reads what is missing after taking it, so
// concurrent runs over the same range insert every slot once, with a plain
// INSERT: ON CONFLICT DO NOTHING costs about 60 % more per row. Workers
// never take this lock. It is the series' row, locked FOR NO KEY UPDATE
// (the lock a deletion's trigger takes to count deletions), which only a
// role with UPDATE on the series table can take. An advisory lock would
// not do: any role may take any key, and a role with no grant on the
// schema could stall every writer of the series. A series
// whose row is gone is an error wrapping ErrUnknownSeries.
func (c *Client) lockSeries(ctx context.Context, tx pgx.Tx) error {
	var deletions int64
	err := tx.QueryRow(ctx, c.sql.lockDeletions, c.name, c.interval).Scan(&deletions)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s is no longer registered", seriesdb.ErrUnknownSeries, c.grid)
	}
	return err
}

// planned returns args for a statement whose best plan depends on how many
// rows the slot table holds, such as a count over a range: the statement is
// planned for each call with its arguments (an unnamed statement whose
// description pgx caches: still one round trip), never from a cached
// generic plan. A generic plan made while the table was empty (a new
// schema, or one truncated and vacuumed) scans the whole table for every
// range, for as long as the connection lives or until the table is next
// analyzed, so that each chunk of a materialization re-counts a table
// that grew by the chunk (docs/design/plan-stable-sql.md, rule 1).
// Planning a range read costs well under a millisecond.
func planned(args ...any) []any {
	return append([]any{pgx.QueryExecModeCacheDescribe}, args...)
}
