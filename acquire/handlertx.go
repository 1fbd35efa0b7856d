package acquire

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// savepoint is the name under which a handler's writes can be undone. It is
// taken lazily, before the handler's first statement, so handlers that do
// not write (or write elsewhere) cost no round trip and no subtransaction.
const savepoint = "almanac_handler"

// connGuard serializes the use of a held connection between the handler and
// the pinger that keeps the dead-man switch from firing: a pgx connection
// must never carry two requests at once.
type connGuard struct {
	mu sync.Mutex
}

// handlerTx is the transaction a locked-mode handler receives. It is the
// slot's transaction, with three differences: statements are serialized with
// the pinger, the first statement is preceded by a savepoint so a failure
// can be rolled back alone, and Commit and Rollback are refused, because the
// transaction ends with the slot's outcome.
//
// LargeObjects and Conn give direct access to the connection, bypassing the
// serialization: do not use them while the handler's context is live.
type handlerTx struct {
	tx    pgx.Tx
	guard *connGuard
	// nested is set for savepoints the handler opened itself with Begin:
	// those it may commit and roll back.
	nested bool
	// state is shared by a handler's transaction and its nested ones.
	state *handlerState
}

type handlerState struct {
	saved          bool // the savepoint exists
	releasePending bool // a previous handler's savepoint is still open
}

func (h *handlerTx) ensureSavepoint(ctx context.Context) error {
	if h.state.saved {
		return nil
	}
	sql := "SAVEPOINT " + savepoint
	if h.state.releasePending {
		// Piggyback the previous handler's release on this round trip.
		sql = "RELEASE SAVEPOINT " + savepoint + "; " + sql
	}
	if _, err := h.tx.Exec(ctx, sql); err != nil {
		return err
	}
	h.state.saved, h.state.releasePending = true, false
	return nil
}

// lock serializes with the pinger and makes sure the savepoint exists.
func (h *handlerTx) lock(ctx context.Context) error {
	h.guard.mu.Lock()
	if err := h.ensureSavepoint(ctx); err != nil {
		h.guard.mu.Unlock()
		return err
	}
	return nil
}

func (h *handlerTx) unlock() { h.guard.mu.Unlock() }

func (h *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := h.lock(ctx); err != nil {
		return nil, err
	}
	defer h.unlock()
	inner, err := h.tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &handlerTx{tx: inner, guard: h.guard, nested: true, state: h.state}, nil
}

func (h *handlerTx) Commit(ctx context.Context) error {
	if !h.nested {
		return ErrTxManaged
	}
	h.guard.mu.Lock()
	defer h.guard.mu.Unlock()
	return h.tx.Commit(ctx)
}

func (h *handlerTx) Rollback(ctx context.Context) error {
	if !h.nested {
		return ErrTxManaged
	}
	h.guard.mu.Lock()
	defer h.guard.mu.Unlock()
	return h.tx.Rollback(ctx)
}

func (h *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := h.lock(ctx); err != nil {
		return 0, err
	}
	defer h.unlock()
	return h.tx.CopyFrom(ctx, table, columns, src)
}

func (h *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := h.lock(ctx); err != nil {
		return errBatchResults{err}
	}
	return &guardedBatch{BatchResults: h.tx.SendBatch(ctx, b), unlock: h.unlockOnce()}
}

func (h *handlerTx) LargeObjects() pgx.LargeObjects { return h.tx.LargeObjects() }

func (h *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := h.lock(ctx); err != nil {
		return nil, err
	}
	defer h.unlock()
	return h.tx.Prepare(ctx, name, sql)
}

func (h *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := h.lock(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	defer h.unlock()
	return h.tx.Exec(ctx, sql, args...)
}

func (h *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := h.lock(ctx); err != nil {
		return nil, err
	}
	rows, err := h.tx.Query(ctx, sql, args...)
	if err != nil {
		h.unlock()
		return nil, err
	}
	return &guardedRows{Rows: rows, unlock: h.unlockOnce()}, nil
}

func (h *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := h.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return guardedRow{rows: rows}
}

func (h *handlerTx) Conn() *pgx.Conn { return h.tx.Conn() }

func (h *handlerTx) unlockOnce() func() {
	var once sync.Once
	return func() { once.Do(h.unlock) }
}

// guardedRows releases the connection when the rows are done: when Next
// reports the end (pgx closes the rows then) or on Close.
type guardedRows struct {
	pgx.Rows
	unlock func()
}

func (r *guardedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.unlock()
	return false
}

func (r *guardedRows) Close() {
	r.Rows.Close()
	r.unlock()
}

// guardedRow reads the first row like pgx's QueryRow does.
type guardedRow struct{ rows pgx.Rows }

func (r guardedRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type guardedBatch struct {
	pgx.BatchResults
	unlock func()
}

func (b *guardedBatch) Close() error {
	defer b.unlock()
	return b.BatchResults.Close()
}

type errBatchResults struct{ err error }

func (b errBatchResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatchResults) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatchResults) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatchResults) Close() error                     { return b.err }
func (b errBatchResults) Tx() pgx.Tx                       { return nil }
