package acquire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	// state is shared by the handlers of a batch, run by one handler's
	// transaction and its nested ones.
	state *handlerState
	run   *handlerRun
}

// handlerState is the savepoint bookkeeping of a batch.
type handlerState struct {
	saved          bool // the savepoint exists
	releasePending bool // a previous handler's savepoint is still open
}

// errHandlerReturned refuses statements on a handler's transaction once the
// handler has returned (from a goroutine it left running).
var errHandlerReturned = errors.New("acquire: the slot's handler has returned; its transaction can no longer be used")

// handlerRun tracks what one handler's run holds of the connection: rows
// and batches it has not closed yet, each of which keeps the connection, and
// whether its statements are refused because it has returned.
type handlerRun struct {
	mu      sync.Mutex
	open    map[*sync.Once]func()
	refused bool
}

// hold registers something that keeps the connection until release is
// called (by its Close, or by seal); release runs once.
func (r *handlerRun) hold(release func()) func() {
	once := &sync.Once{}
	r.mu.Lock()
	if r.open == nil {
		r.open = map[*sync.Once]func(){}
	}
	r.open[once] = release
	r.mu.Unlock()
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.open, once)
			r.mu.Unlock()
			release()
		})
	}
}

// refuse makes every later statement of the run fail with
// errHandlerReturned.
func (r *handlerRun) refuse() {
	r.mu.Lock()
	r.refused = true
	r.mu.Unlock()
}

func (r *handlerRun) isRefused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// releaseAll gives the connection back from the rows and batches the
// handler left open.
func (r *handlerRun) releaseAll() {
	r.mu.Lock()
	var closers []func()
	for once, release := range r.open {
		closers = append(closers, func() { once.Do(release) })
		delete(r.open, once)
	}
	r.mu.Unlock()
	for _, c := range closers {
		c()
	}
}

// seal is called once the handler has returned: it refuses the run's
// further statements, gives the connection back from the rows and batches
// the handler left open (a panic, an early return), and waits up to wait
// for a statement that a goroutine of the handler may still be running. It
// fails if that statement keeps the connection longer.
func (r *handlerRun) seal(guard *connGuard, wait time.Duration) error {
	r.refuse()
	r.releaseAll()
	deadline := time.Now().Add(wait)
	for !guard.mu.TryLock() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: a statement the handler started is still running %s after it returned", errHandlerReturned, wait)
		}
		time.Sleep(time.Millisecond)
	}
	guard.mu.Unlock()
	return nil
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

// lock serializes with the pinger and makes sure the savepoint exists. It
// refuses statements once the handler has returned.
func (h *handlerTx) lock(ctx context.Context) error {
	h.guard.mu.Lock()
	if h.run.isRefused() {
		h.guard.mu.Unlock()
		return errHandlerReturned
	}
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
	return &handlerTx{tx: inner, guard: h.guard, nested: true, state: h.state, run: h.run}, nil
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
	br := h.tx.SendBatch(ctx, b)
	return &guardedBatch{BatchResults: br, unlock: h.run.hold(func() { _ = br.Close(); h.unlock() })}
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
	return &guardedRows{Rows: rows, unlock: h.run.hold(func() { rows.Close(); h.unlock() })}, nil
}

func (h *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := h.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return guardedRow{rows: rows}
}

func (h *handlerTx) Conn() *pgx.Conn { return h.tx.Conn() }

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

func (r *guardedRows) Close() { r.unlock() }

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
	err := b.BatchResults.Close()
	b.unlock()
	return err
}

type errBatchResults struct{ err error }

func (b errBatchResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatchResults) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatchResults) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatchResults) Close() error                     { return b.err }
func (b errBatchResults) Tx() pgx.Tx                       { return nil }

// ErrTxManaged is returned when a handler calls Commit or Rollback on the
// transaction it was given: the transaction belongs to almanac, which ends
// it with the slot's outcome.
var ErrTxManaged = errors.New("the slot's transaction is managed by almanac: return from the handler instead of committing or rolling back")
