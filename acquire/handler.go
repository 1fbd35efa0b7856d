package acquire

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
)

// Handler does the work of one slot in locked mode. Everything it writes
// through tx commits atomically with the slot's outcome:
//
//   - return nil: the slot is COMPLETE;
//   - return Skip(reason): the slot is SKIP;
//   - return Snooze(d): the slot stays AVAILABLE and is handed out again
//     after d, not counted as a failure;
//   - return any other error, or panic: the handler's writes are rolled back,
//     and the failure is recorded (fail_count, message, retry delay, or
//     parking after the maximum of attempts).
//
// A handler that fails because of a database fault (a lost connection, a
// restarting server, a serialization failure) did not fail at its work: the
// slot is snoozed for a second instead, without counting a failure. If the
// worker dies or loses its connection, nothing is written and the slot is
// acquirable again at once. ctx is cancelled when the worker shuts down,
// when MaxWork passes (see Policy.MaxWork), or when the connection is found
// dead.
//
// Misbehaviour ends in a recorded outcome and a worker that goes on: rows or
// batches the handler leaves open are closed when it returns, statements a
// goroutine of the handler sends after that are refused, a handler that ends
// the transaction itself (an Exec of COMMIT or ROLLBACK) fails its slot, and
// one that ignores its context is abandoned a quarter of a second after the
// context ends.
type Handler func(ctx context.Context, tx pgx.Tx, s Slot) error

// errMaxWork is the cause of a handler context cancelled because the
// handler ran for longer than Policy.MaxWork.
var errMaxWork = errors.New("handler exceeded MaxWork")

// handlerGrace is how long a handler has to return once its context is
// done (MaxWork passed, shutdown, lost connection) before the worker stops
// waiting for it: the worker ends the slot's transaction, records the
// outcome and goes on, and the handler's goroutine is left to finish alone,
// its transaction refused.
const handlerGrace = 250 * time.Millisecond

// run runs the handler for one slot and decides its outcome. The handler
// runs on its own goroutine so that one that ignores its context cannot
// keep the worker: handlerGrace after its context ends, the worker gives up
// on it (see abandonHandler). q is the queue s was taken for.
func (b *lockedBatch) run(ctx context.Context, q *Queue, s Slot, h Handler) Result {
	maxWork := q.opts.MaxWork
	hctx, cancel := context.WithTimeoutCause(ctx, maxWork, q.maxWorkCause)
	defer cancel()
	htx := &handlerTx{tx: b.tx, guard: b.guard, state: b.state, run: &handlerRun{}}
	start := time.Now()
	b.handlerStart.Store(start.UnixNano())
	returned := make(chan error, 1)
	go func() { returned <- callHandler(hctx, h, htx, s) }()
	var err error
	select {
	case err = <-returned:
	case <-hctx.Done():
		select {
		case err = <-returned:
		case <-time.After(handlerGrace):
			err = fmt.Errorf("%w; the handler did not return within %s of its context ending, and its transaction was abandoned",
				context.Cause(hctx), handlerGrace)
			b.abandonHandler(htx.run, err)
		}
	}
	b.handlerStart.Store(0)
	res := Result{Slot: s, Duration: time.Since(start)}
	overran := errors.Is(context.Cause(hctx), errMaxWork)
	if overran && err != nil && !errors.Is(err, errMaxWork) {
		err = fmt.Errorf("%w (%v)", context.Cause(hctx), err)
	}
	res.timedOut = overran && err != nil
	if overran && err == nil {
		res.Overrun = res.Duration - maxWork
	}
	if b.broken == nil {
		if serr := htx.run.seal(b.guard, handlerGrace); serr != nil {
			b.abandonHandler(htx.run, serr)
		} else if _, status := b.connState(); status == 'I' {
			// The handler ended the transaction itself (an Exec of COMMIT
			// or ROLLBACK): the slot's lock went with it.
			b.broken = fmt.Errorf("%w: the handler ended it", ErrTxManaged)
		}
	}
	if b.broken != nil && (err == nil || isSkipOrSnooze(err)) {
		err = b.broken
	}

	// A handler that swallowed an SQL error leaves the transaction aborted:
	// its outcome cannot be committed, so it counts as a failure.
	if b.broken == nil && (err == nil || isSkipOrSnooze(err)) {
		if _, status := b.connState(); b.state.saved && status == 'E' {
			err = errors.New("acquire: handler returned after a failed statement, which aborted its writes")
		}
	}
	switch {
	case ctx.Err() != nil && !isSkipOrSnooze(err) && err != nil:
		// Shutdown or a lost connection: record nothing, the slot is
		// acquirable again as soon as the transaction ends.
		res.Outcome, res.Err = Abandoned, context.Cause(ctx)
	default:
		res.Outcome, res.Delay, res.Err = q.classify(s, err)
		if res.Outcome == Snoozed {
			if res.saved, err = snoozeData(res.Err); err != nil {
				res.Outcome, res.Delay, res.Err = q.classify(s, err)
			}
		}
	}
	if b.state.saved && b.broken == nil {
		if res.Outcome == Failed || res.Outcome == Parked || res.Outcome == Abandoned {
			b.rollbackHandler(ctx)
		} else {
			b.state.releasePending = true
		}
	}
	b.state.saved = false
	return res
}

// abandonHandler gives up on the transaction of a handler that does not let
// go of it: it refuses the handler's further statements and closes the
// connection, which ends any statement still running and rolls the
// transaction back. The batch's outcomes are then recorded out of band.
//
// The socket is closed first, because that is safe while a statement of
// the handler's goroutine is using the connection (pgx's connection is
// not): the statement fails at once and lets go of the guard, and only
// then is the connection itself closed.
func (b *lockedBatch) abandonHandler(run *handlerRun, cause error) {
	if b.broken == nil {
		b.broken = cause
	}
	run.refuse()
	_ = b.tx.Conn().PgConn().Conn().Close()
	run.releaseAll()
	b.guard.mu.Lock()
	_ = b.tx.Conn().PgConn().Close(context.Background())
	b.guard.mu.Unlock()
}

// rollbackHandler undoes the handler's writes.
func (b *lockedBatch) rollbackHandler(ctx context.Context) {
	b.guard.mu.Lock()
	defer b.guard.mu.Unlock()
	// The transaction itself is needed for the outcomes of the batch, so
	// this runs even when the handler's context is done.
	_, err := b.tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+savepoint+"; RELEASE SAVEPOINT "+savepoint)
	if err != nil {
		b.q.opts.Logger.Warn("almanac: rolling back a handler failed", "series", b.q.name, "error", err)
	}
}

func isSkipOrSnooze(err error) bool {
	var skip *SkipError
	var snooze *SnoozeError
	return errors.As(err, &skip) || errors.As(err, &snooze)
}

// callHandler runs h, turning a panic into an error that carries the stack.
func callHandler(ctx context.Context, h Handler, tx pgx.Tx, s Slot) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, tx, s)
}
