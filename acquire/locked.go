package acquire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/redact"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/safetext"
	"github.com/almanacdev/almanac/slot"
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

// ErrConnectionLost is the cause of a handler context cancelled because the
// held connection stopped answering pings; the slot's transaction is gone.
var ErrConnectionLost = errors.New("held connection lost")

// maxMessage bounds the failure text stored on a slot, in bytes.
const maxMessage = 4096

// errMaxWork is the cause of a handler context cancelled because the
// handler ran for longer than Policy.MaxWork.
var errMaxWork = errors.New("handler exceeded MaxWork")

// handlerGrace is how long a handler has to return once its context is
// done (MaxWork passed, shutdown, lost connection) before the worker stops
// waiting for it: the worker ends the slot's transaction, records the
// outcome and goes on, and the handler's goroutine is left to finish alone,
// its transaction refused.
const handlerGrace = 250 * time.Millisecond

// outOfBandTimeout bounds recording outcomes after the slot's transaction
// was lost.
const outOfBandTimeout = 30 * time.Second

// Run acquires the first acquirable slot of the series and runs h for it in
// locked mode. It returns ok=false and no error when no slot is acquirable.
// The error reports a failure to acquire or to record the outcome (then the
// outcome is Abandoned, and the slot acquirable again); the handler's own
// failure is in the Result.
func (q *Queue) Run(ctx context.Context, h Handler) (res Result, ok bool, err error) {
	results, err := q.RunBatch(ctx, 1, h)
	if len(results) == 0 {
		return Result{}, false, err
	}
	return results[0], true, err
}

// RunBatch is locked mode for short tasks: it locks up to max acquirable
// slots in one transaction, runs h for each in turn (each in its own
// savepoint, so a failing handler affects no other), and records every
// outcome with one UPDATE and one commit. It returns the results in slot
// order; none when no slot was acquirable.
//
// Handlers of a batch share one transaction, so keep them short: a batch
// holds its connection, and its locks, until the last handler returns. Each
// handler that writes uses a subtransaction; PostgreSQL caches 64 of them
// per transaction, so batches of writing handlers larger than 64 make other
// sessions' snapshots slower while they run.
//
// Faults are absorbed where that is safe. Beginning and selecting are
// repeated after a transient fault (nothing is held yet). When the
// transaction is lost afterwards (its connection died, a handler broke it),
// failures are still recorded, in a new transaction guarded by the fencing
// token, and the other slots become acquirable again with their handlers'
// writes rolled back (Abandoned). When the connection is lost during
// COMMIT, the database says whether the commit happened. When recording
// fails for a reason that would recur (a trigger refusing the write), every
// slot of the batch is recorded as failed with that reason, so that it backs
// off instead of running again at once for ever.
func (q *Queue) RunBatch(ctx context.Context, max int, h Handler) ([]Result, error) {
	results, err := q.runBatch(ctx, max, h)
	for _, r := range results {
		if r.Outcome != Completed && r.Outcome != Skipped {
			q.floor.rewind() // the slot is AVAILABLE again
			break
		}
	}
	return results, err
}

func (q *Queue) runBatch(ctx context.Context, max int, h Handler) ([]Result, error) {
	if max < 1 {
		return nil, fmt.Errorf("acquire: batch size %d: expected at least 1", max)
	}
	if err := q.held.acquire(ctx); err != nil {
		return nil, err
	}
	defer q.held.release()

	var tx pgx.Tx
	var slots []Slot
	var xid int64
	// Where to search is settled before the transaction holds a connection
	// (see frontier).
	lo, epoch := q.searchFrom(ctx, max)
	err := retry.Do(ctx, func(ctx context.Context) error {
		var err error
		if tx, err = q.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: q.lockedBegin()}); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if slots, xid, err = q.selectLocked(ctx, tx, max, lo, epoch); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	cleanup := context.WithoutCancel(ctx)
	defer tx.Rollback(cleanup) //nolint:errcheck // a no-op after Commit
	if len(slots) == 0 {
		return nil, nil // the deferred ROLLBACK ends the empty search
	}

	b := &lockedBatch{q: q, tx: tx, guard: &connGuard{}, state: &handlerState{}}
	connCtx, connLost := context.WithCancelCause(ctx)
	defer connLost(nil)
	stopPinger := b.startPinger(connCtx, connLost)
	results := make([]Result, 0, len(slots))
	for _, s := range slots {
		if closed, _ := b.connState(); ctx.Err() != nil || b.broken != nil || closed {
			break // shutdown or a lost transaction: the slots not started stay as they are
		}
		results = append(results, b.run(connCtx, s, h))
	}
	stopPinger()

	cause := b.broken
	if c := context.Cause(connCtx); cause == nil && errors.Is(c, ErrConnectionLost) {
		cause = c
	}
	if cause == nil && tx.Conn().IsClosed() {
		cause = ErrConnectionLost
	}
	if cause != nil {
		_ = tx.Rollback(cleanup)
		return q.recordOutOfBand(cleanup, results, cause)
	}
	if err := q.finish(cleanup, tx, results); err != nil {
		_ = tx.Rollback(cleanup)
		if !retry.Transient(cleanup, err) {
			results = asFailures(q, results, err)
		}
		return q.recordOutOfBand(cleanup, results, err)
	}
	if err := tx.Commit(cleanup); err != nil {
		return q.afterFailedCommit(cleanup, results, xid, err)
	}
	return results, nil
}

// afterFailedCommit decides what a failed COMMIT of a batch means. A lost
// connection leaves the outcome unknown: the database says whether the
// transaction committed. A commit the server refused (a deferred
// constraint of a handler's write) committed nothing, and would be refused
// again: every slot is recorded as failed with the reason.
func (q *Queue) afterFailedCommit(ctx context.Context, results []Result, xid int64, err error) ([]Result, error) {
	if !retry.Transient(ctx, err) {
		return q.recordOutOfBand(ctx, asFailures(q, results, fmt.Errorf("commit: %w", err)), err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, outOfBandTimeout)
	committed, cerr := retry.Committed(checkCtx, q.pool, xid)
	cancel()
	switch {
	case cerr != nil:
		err = fmt.Errorf("acquire: commit: %w; and whether it committed is unknown: %w", err, cerr)
		return abandon(results, err), err
	case committed:
		return results, nil
	default:
		return q.recordOutOfBand(ctx, results, fmt.Errorf("commit: %w", err))
	}
}

func (q *Queue) lockedBegin() string {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return fmt.Sprintf(q.sql.lockedBegin, ms(q.opts.DeadMan), max(1, int(q.opts.DeadMan.Seconds()/2)),
		max(1, int(q.opts.DeadMan.Seconds()/6)), ms(q.opts.DeadMan))
}

// selectLocked locks up to max slots in tx and returns them with the
// transaction's id: from lo, where searchFrom said the search starts (in
// epoch), and when that finds fewer than max, from the part of the range
// before it too.
func (q *Queue) selectLocked(ctx context.Context, tx pgx.Tx, max int, lo time.Time, epoch uint64) ([]Slot, int64, error) {
	slots, xid, err := q.selectLockedIn(ctx, tx, max, lo, q.to, true)
	if err != nil {
		return nil, 0, err
	}
	whole, short := !lo.After(q.from), len(slots) < max
	if short && !whole {
		// In the same transaction, so no slot may come twice: the part of
		// the range the first look did not search, and no expired leases
		// (the first look took all it could, and holds their rows).
		more, _, err := q.selectLockedIn(ctx, tx, max-len(slots), q.from, lo, false)
		if err != nil {
			return nil, 0, err
		}
		whole = true
		slots = append(more, slots...)
		sort.Slice(slots, func(i, j int) bool { return slots[i].Start.Before(slots[j].Start) })
	}
	q.floor.advance(epoch, slots, whole, short)
	q.afterSearch(slots, max, whole, short)
	return slots, xid, nil
}

// selectLockedIn locks up to max slots in tx: AVAILABLE slots in [lo, hi),
// and with takeovers expired leases of the whole range.
func (q *Queue) selectLockedIn(ctx context.Context, tx pgx.Tx, max int, lo, hi time.Time, takeovers bool) ([]Slot, int64, error) {
	from, to := q.expiredIn(takeovers)
	rows, err := tx.Query(ctx, q.sql.selectLocked, q.name, q.interval, max, from, to, q.opts.Lag.Microseconds(),
		q.opts.TakeoverGrace.Microseconds(), lo, hi)
	if err != nil {
		return nil, 0, fmt.Errorf("select slots: %w", err)
	}
	var out []Slot
	var r slotRow
	var heldFence, xid int64
	var heldOwner pgtype.UUID
	_, err = pgx.ForEachRow(rows, append(r.dest(), &heldFence, &heldOwner, &xid), func() error {
		s := r.slot(q)
		// Locked mode writes attempts at the end: this run is one more.
		s.Attempt, s.heldFence, s.heldOwner = r.attempts+1, heldFence, heldOwner
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("select slots: %w", err)
	}
	return out, xid, nil
}

// slotRow scans the columns every acquisition returns. attempts counts the
// acquisitions recorded so far.
type slotRow struct {
	start, end         time.Time
	attempts, failures int
	data               []byte
	message            *string
	tookOver           bool
	fence, generation  int64
}

func (r *slotRow) dest() []any {
	return []any{&r.start, &r.end, &r.attempts, &r.failures, &r.data, &r.message, &r.tookOver, &r.fence, &r.generation}
}

func (r *slotRow) slot(q *Queue) Slot {
	s := Slot{
		Name: q.name, Fence: r.fence, Generation: r.generation, Attempt: r.attempts, FailCount: r.failures, TookOver: r.tookOver,
	}
	loc := q.grid.Location()
	s.Slot = slot.Slot{Start: r.start.In(loc), End: r.end.In(loc), Interval: q.grid.Interval()}
	if g, err := q.grid.Floor(r.start); err == nil && g.Start.Equal(r.start) {
		s.Slot.Index = g.Index
	}
	if r.data != nil {
		s.Data = json.RawMessage(append([]byte(nil), r.data...))
	}
	if r.message != nil {
		s.Message = *r.message
	}
	return s
}

// lockedBatch is one locked-mode transaction and its slots.
type lockedBatch struct {
	q     *Queue
	tx    pgx.Tx
	guard *connGuard
	state *handlerState
	// handlerStart is when the running handler started (UnixNano), 0
	// between handlers; the pinger stops pinging for a handler that
	// overruns MaxWork by DeadMan.
	handlerStart atomic.Int64
	// broken is set when the transaction can no longer record outcomes: a
	// handler ended it, or did not return and its connection was closed.
	broken error
}

// startPinger keeps the dead-man switch from firing while this process is
// alive: every DeadMan/4 it sends an empty query on the held connection,
// unless a handler statement is using it right then. A failed ping means the
// session is gone; it cancels the handlers' context with ErrConnectionLost.
//
// It is a timer, not a goroutine: most transactions end long before the
// first ping is due, and starting and stopping a goroutine with a ticker for
// each of them was a measurable share of a short transaction's cost. stop
// waits for a ping in progress.
func (b *lockedBatch) startPinger(ctx context.Context, lost context.CancelCauseFunc) (stop func()) {
	interval := b.q.opts.DeadMan / 4
	var (
		mu       sync.Mutex
		stopped  bool
		inFlight sync.WaitGroup
		t        *time.Timer
	)
	t = time.AfterFunc(interval, func() {
		mu.Lock()
		if stopped || ctx.Err() != nil {
			mu.Unlock()
			return
		}
		inFlight.Add(1)
		mu.Unlock()
		defer inFlight.Done()
		if b.ping(ctx, lost) {
			mu.Lock()
			if !stopped {
				t.Reset(interval)
			}
			mu.Unlock()
		}
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		inFlight.Wait()
	}
}

// ping is one tick of the pinger; it reports whether to go on.
func (b *lockedBatch) ping(ctx context.Context, lost context.CancelCauseFunc) bool {
	if start := b.handlerStart.Load(); start != 0 &&
		time.Since(time.Unix(0, start)) > b.q.opts.MaxWork+b.q.opts.DeadMan {
		return true // let the dead-man switch end a handler that ignores its deadline
	}
	if b.q.testNoPing {
		return true
	}
	if !b.guard.mu.TryLock() {
		return true // a statement is running: the session is not idle
	}
	pingCtx, cancel := context.WithTimeout(ctx, b.q.opts.DeadMan/2)
	err := b.tx.Conn().PgConn().Ping(pingCtx)
	cancel()
	b.guard.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		b.q.opts.Logger.Warn("almanac: held connection lost", "series", b.q.name, "interval", b.q.interval, "error", err)
		lost(fmt.Errorf("%w: %v", ErrConnectionLost, err))
		return false
	}
	return ctx.Err() == nil
}

// run runs the handler for one slot and decides its outcome. The handler
// runs on its own goroutine so that one that ignores its context cannot
// keep the worker: handlerGrace after its context ends, the worker gives up
// on it (see abandonHandler).
func (b *lockedBatch) run(ctx context.Context, s Slot, h Handler) Result {
	maxWork := b.q.opts.MaxWork
	hctx, cancel := context.WithTimeoutCause(ctx, maxWork, b.q.maxWorkCause)
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
		res.Outcome, res.Delay, res.Err = b.q.classify(s, err)
		if res.Outcome == Snoozed {
			if res.saved, err = snoozeData(res.Err); err != nil {
				res.Outcome, res.Delay, res.Err = b.q.classify(s, err)
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

// connState reads whether the held connection is closed and its
// transaction status, serialized with the pinger, which updates both.
func (b *lockedBatch) connState() (closed bool, txStatus byte) {
	b.guard.mu.Lock()
	defer b.guard.mu.Unlock()
	conn := b.tx.Conn().PgConn()
	return conn.IsClosed(), conn.TxStatus()
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

// faultDelay is how long a slot whose handler hit a database fault waits
// before it is tried again.
const faultDelay = time.Second

// classify maps a handler's return value to an outcome and a delay. A
// handler that failed because of a database fault (a lost connection, a
// restarting server, a serialization failure: see retry.Transient) did not
// fail at its work: the slot is snoozed for faultDelay, not counted as a
// failure, so a fault can neither park a slot nor make it back off for an
// hour.
func (q *Queue) classify(s Slot, err error) (Outcome, time.Duration, error) {
	var skip *SkipError
	var snooze *SnoozeError
	switch {
	case err == nil:
		return Completed, 0, nil
	case errors.As(err, &skip):
		return Skipped, 0, err
	case errors.As(err, &snooze):
		return Snoozed, max(snooze.After, 0), err
	case !errors.Is(err, errMaxWork) && retry.Transient(context.Background(), err):
		return Snoozed, faultDelay, err
	}
	failures := s.FailCount + 1
	if q.opts.MaxAttempts > 0 && failures >= q.opts.MaxAttempts {
		return Parked, 0, err
	}
	delay, retry := q.opts.Retry(failures, err)
	if !retry {
		return Parked, 0, err
	}
	return Failed, max(delay, 0), err
}

// outcomesPerStatement bounds the outcomes finish writes with one
// statement. Each row looks its values up in the statement's arrays, and
// an element of an array of variable width (a status, a message) or with
// NULLs is found by walking the array from its start, so the cost per
// outcome grows with the batch: measured 6.1 µs per outcome in a batch of
// 100, 7.4 at 500, 9.0 at 1,000, 13 at 2,000 and 64 at 16,000.
const outcomesPerStatement = 500

// finish writes the outcomes of the batch, sorted by slot start as
// finishLocked takes them, with one statement per outcomesPerStatement.
func (q *Queue) finish(ctx context.Context, tx pgx.Tx, results []Result) error {
	results = slices.SortedFunc(slices.Values(results), func(a, b Result) int { return a.Slot.Start.Compare(b.Slot.Start) })
	for chunk := range slices.Chunk(results, outcomesPerStatement) {
		if err := q.finishSorted(ctx, tx, chunk); err != nil {
			return err
		}
	}
	return nil
}

// finishSorted writes outcomes sorted by slot start in one statement.
func (q *Queue) finishSorted(ctx context.Context, tx pgx.Tx, results []Result) error {
	var (
		starts   []time.Time
		statuses []string
		fences   []int64
		attempts []int
		failures []int
		messages []*string
		delays   []*int64
		data     []*string
		events   []string
		owners   []pgtype.UUID // of the expired leases taken over, else NULL
		held     []int64       // their fences
	)
	for _, r := range results {
		if r.Outcome == Abandoned {
			continue
		}
		s := r.Slot
		status, failCount, message, delay, saved, err := outcomeColumns(r)
		if err != nil {
			return err
		}
		starts = append(starts, s.Start)
		statuses = append(statuses, status)
		fences = append(fences, s.Fence)
		attempts = append(attempts, s.Attempt)
		if failCount < 0 {
			failCount = s.FailCount
		}
		failures = append(failures, failCount)
		if message == nil && r.Outcome == Snoozed && s.Message != "" {
			message = &s.Message
		}
		messages = append(messages, message)
		delays = append(delays, delay)
		data = append(data, saved)
		events = append(events, r.Outcome.event())
		var owner pgtype.UUID
		if s.TookOver {
			owner = s.heldOwner
		}
		owners, held = append(owners, owner), append(held, s.heldFence)
	}
	var err error
	switch len(starts) {
	case 0:
		return nil
	case 1:
		_, err = tx.Exec(ctx, q.sql.finishOne, q.name, q.interval, starts[0], statuses[0], fences[0], attempts[0], failures[0],
			messages[0], delays[0], data[0], events[0], q.opts.Owner, owners[0], held[0])
	default:
		var written int
		err = tx.QueryRow(ctx, q.sql.finishLocked, q.name, q.interval, starts, statuses, fences, attempts, failures, messages, delays,
			data, events, q.opts.Owner, owners, held).Scan(&written)
		if err == nil && written != len(starts) {
			err = fmt.Errorf("%d of %d written: %w", written, len(starts), errOutcomesMissing)
		}
	}
	if err != nil {
		return fmt.Errorf("acquire: record outcomes: %w", err)
	}
	return nil
}

// errOutcomesMissing reports a batch write that found fewer of its locked
// slots than it was given outcomes for, which only outcomes out of slot
// order cause (see finishLocked): committing would keep the handlers' work
// and leave those slots to run again.
var errOutcomesMissing = errors.New("outcomes not written to their locked slots")

// outcomeColumns returns the values a result writes: status, fail_count (-1
// keeps the current one), message, delay in microseconds (nil: none,
// negative: parked) and checkpoint data (nil: keep).
func outcomeColumns(r Result) (status string, failCount int, message *string, delay *int64, data *string, err error) {
	us := func(d time.Duration) *int64 { v := d.Microseconds(); return &v }
	text := func(s string) *string { s = boundText(s); return &s }
	switch r.Outcome {
	case Completed:
		if r.Overrun > 0 {
			return "COMPLETE", 0, text(fmt.Sprintf("completed %s after its MaxWork had passed", r.Overrun.Round(time.Millisecond))), nil, nil, nil
		}
		return "COMPLETE", 0, nil, nil, nil, nil
	case Skipped:
		var skip *SkipError
		errors.As(r.Err, &skip)
		reason := ""
		if skip != nil {
			reason = skip.Reason
		}
		return "SKIP", -1, text(reason), nil, nil, nil
	case Snoozed:
		var snooze *SnoozeError
		if !errors.As(r.Err, &snooze) && r.Err != nil {
			// A database fault: say so on the slot.
			return "AVAILABLE", -1, text("retrying after a database fault: " + r.Err.Error()), us(r.Delay), nil, nil
		}
		return "AVAILABLE", -1, nil, us(r.Delay), r.saved, nil
	case Failed:
		return "AVAILABLE", r.Slot.FailCount + 1, text(r.Err.Error()), us(r.Delay), nil, nil
	case Parked:
		parked := int64(-1)
		return "AVAILABLE", r.Slot.FailCount + 1, text("gave up after " + fmt.Sprint(r.Slot.FailCount+1) + " failures: " + r.Err.Error()), &parked, nil, nil
	}
	return "", 0, nil, nil, nil, fmt.Errorf("acquire: no columns for outcome %q", r.Outcome)
}

// boundText returns s as it can be stored as a slot's message: passwords
// redacted, valid UTF-8 without NUL or other control characters but
// newline and tab, at most maxMessage bytes. A handler's error text can be
// anything; the write that records it must not fail because of it.
func boundText(s string) string { return safetext.Head(redact.String(s), maxMessage) }

// snoozeData marshals the checkpoint a snooze carries, if any.
func snoozeData(err error) (*string, error) {
	var snooze *SnoozeError
	if !errors.As(err, &snooze) || snooze.Data == nil {
		return nil, nil
	}
	b, mErr := json.Marshal(snooze.Data)
	if mErr != nil {
		return nil, fmt.Errorf("acquire: snooze data: %w", mErr)
	}
	text := string(b)
	return &text, nil
}

// recordOutOfBand records what it can of a batch whose transaction was
// lost (cause): nothing of it committed, so every result is Abandoned (the
// slot is acquirable again, the handler's writes rolled back), except the
// failures. Those are recorded in a new transaction, so that a slot that
// keeps failing (or keeps losing its connection while it fails) counts its
// failures, backs off and parks instead of running again at once for ever.
// Each write is guarded by the fence the slot had when the batch took it
// and skipped if another worker holds the slot by now (or takes it within
// two seconds). It returns an error when anything was left unrecorded.
func (q *Queue) recordOutOfBand(ctx context.Context, results []Result, cause error) ([]Result, error) {
	ctx, cancel := context.WithTimeout(ctx, outOfBandTimeout)
	defer cancel()
	var unrecorded error
	for i, r := range results {
		if r.Outcome != Failed && r.Outcome != Parked {
			if r.Outcome != Abandoned {
				results[i].Outcome, results[i].Err = Abandoned, cause
			}
			unrecorded = cause
			continue
		}
		_, failCount, message, delay, _, _ := outcomeColumns(r)
		var affected int64
		_, werr := q.write(ctx, func(b *pgx.Batch) {
			b.Queue(`SELECT set_config('lock_timeout', '2s', true)`)
			b.Queue(q.sql.failOutOfBand, q.name, q.interval, r.Slot.Start, r.Slot.heldFence, r.Slot.Fence,
				r.Slot.Attempt, failCount, message, delay, q.opts.Owner).Exec(func(tag pgconn.CommandTag) error {
				affected = tag.RowsAffected()
				return nil
			})
		})
		if werr != nil || affected == 0 {
			q.opts.Logger.Warn("almanac: recording a failure after the slot's transaction was lost failed",
				"series", q.name, "interval", q.interval, "slot", r.Slot.Slot.String(), "fence", r.Slot.Fence, "error", werr)
			results[i].Outcome, results[i].Err = Abandoned, cause
			unrecorded = cause
		}
	}
	if unrecorded != nil {
		return results, fmt.Errorf("acquire: %w", unrecorded)
	}
	return results, nil
}

// asFailures turns every outcome of a batch whose transaction cannot commit
// for a reason that would recur into a failure carrying that reason.
func asFailures(q *Queue, results []Result, cause error) []Result {
	for i, r := range results {
		if r.Outcome == Abandoned || r.Outcome == Failed || r.Outcome == Parked {
			continue
		}
		err := fmt.Errorf("acquire: recording the outcome %q failed: %w", r.Outcome, cause)
		results[i].Outcome, results[i].Delay, results[i].Err = q.classify(r.Slot, err)
	}
	return results
}

// abandon marks every result as not recorded because of cause.
func abandon(results []Result, cause error) []Result {
	for i := range results {
		results[i].Outcome, results[i].Err = Abandoned, cause
	}
	return results
}
