package acquire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

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
// If the worker dies or loses its connection, nothing is written and the
// slot is acquirable again at once. ctx is cancelled when the worker shuts
// down, when MaxWork passes, or when the connection is found dead; tx must
// not be used after the handler returns.
type Handler func(ctx context.Context, tx pgx.Tx, s Slot) error

// ErrConnectionLost is the cause of a handler context cancelled because the
// held connection stopped answering pings; the slot's transaction is gone.
var ErrConnectionLost = errors.New("held connection lost")

// maxMessage bounds the failure text stored on a slot.
const maxMessage = 4096

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
func (q *Queue) RunBatch(ctx context.Context, max int, h Handler) ([]Result, error) {
	if max < 1 {
		return nil, fmt.Errorf("acquire: batch size %d: expected at least 1", max)
	}
	if err := q.held.acquire(ctx); err != nil {
		return nil, err
	}
	defer q.held.release()

	tx, err := q.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: q.lockedBegin()})
	if err != nil {
		return nil, fmt.Errorf("acquire: begin: %w", err)
	}
	cleanup := context.WithoutCancel(ctx)
	defer tx.Rollback(cleanup) //nolint:errcheck // a no-op after Commit

	slots, err := q.selectLocked(ctx, tx, max)
	if err != nil || len(slots) == 0 {
		return nil, err
	}

	b := &lockedBatch{q: q, tx: tx, guard: &connGuard{}, state: &handlerState{}}
	connCtx, connLost := context.WithCancelCause(ctx)
	defer connLost(nil)
	stopPinger := b.startPinger(connCtx, connLost)
	results := make([]Result, 0, len(slots))
	for _, s := range slots {
		if ctx.Err() != nil || tx.Conn().IsClosed() {
			break // shutdown or a dead connection: the slots not started stay as they are
		}
		results = append(results, b.run(connCtx, s, h))
	}
	stopPinger()

	if cause := context.Cause(connCtx); errors.Is(cause, ErrConnectionLost) || tx.Conn().IsClosed() {
		if cause == nil {
			cause = ErrConnectionLost
		}
		return q.recordTimeouts(cleanup, results, cause)
	}
	if err := q.finish(cleanup, tx, results); err != nil {
		return abandon(results, err), err
	}
	if err := tx.Commit(cleanup); err != nil {
		// Unknown outcome when the connection broke during COMMIT: the slot
		// rows say what happened, and same-database effects went with them.
		return abandon(results, err), fmt.Errorf("acquire: commit: %w", err)
	}
	return results, nil
}

func (q *Queue) lockedBegin() string {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return fmt.Sprintf(q.sql.lockedBegin, ms(q.opts.DeadMan), max(1, int(q.opts.DeadMan.Seconds()/2)),
		max(1, int(q.opts.DeadMan.Seconds()/6)), ms(q.opts.DeadMan))
}

func (q *Queue) selectLocked(ctx context.Context, tx pgx.Tx, max int) ([]Slot, error) {
	rows, err := tx.Query(ctx, q.sql.selectLocked, q.name, q.interval, max, q.from, q.to)
	if err != nil {
		return nil, fmt.Errorf("acquire: select slots: %w", err)
	}
	var out []Slot
	var r slotRow
	var heldFence int64
	var heldOwner pgtype.UUID
	_, err = pgx.ForEachRow(rows, append(r.dest(), &heldFence, &heldOwner), func() error {
		s := r.slot(q)
		// Locked mode writes attempts at the end: this run is one more.
		s.Attempt, s.heldFence, s.heldOwner = r.attempts+1, heldFence, heldOwner
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: select slots: %w", err)
	}
	return out, nil
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
}

// startPinger keeps the dead-man switch from firing while this process is
// alive: every DeadMan/4 it sends an empty query on the held connection,
// unless a handler statement is using it right then. A failed ping means the
// session is gone; it cancels the handlers' context with ErrConnectionLost.
func (b *lockedBatch) startPinger(ctx context.Context, lost context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	interval := b.q.opts.DeadMan / 4
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if start := b.handlerStart.Load(); start != 0 &&
				time.Since(time.Unix(0, start)) > b.q.opts.MaxWork+b.q.opts.DeadMan {
				continue // let the dead-man switch end a handler that ignores its deadline
			}
			if b.q.testNoPing {
				continue
			}
			if !b.guard.mu.TryLock() {
				continue // a statement is running: the session is not idle
			}
			pingCtx, cancel := context.WithTimeout(ctx, b.q.opts.DeadMan/2)
			err := b.tx.Conn().PgConn().Ping(pingCtx)
			cancel()
			b.guard.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				b.q.opts.Logger.Warn("almanac: held connection lost", "series", b.q.name, "interval", b.q.interval, "error", err)
				lost(fmt.Errorf("%w: %v", ErrConnectionLost, err))
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// run runs the handler for one slot and decides its outcome.
func (b *lockedBatch) run(ctx context.Context, s Slot, h Handler) Result {
	hctx, cancel := context.WithTimeoutCause(ctx, b.q.opts.MaxWork,
		fmt.Errorf("acquire: handler exceeded MaxWork (%s)", b.q.opts.MaxWork))
	defer cancel()
	htx := &handlerTx{tx: b.tx, guard: b.guard, state: b.state}
	start := time.Now()
	b.handlerStart.Store(start.UnixNano())
	err := callHandler(hctx, h, htx, s)
	b.handlerStart.Store(0)
	res := Result{Slot: s, Duration: time.Since(start)}
	if err != nil && hctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (%v)", context.Cause(hctx), err)
		res.timedOut = true
	}

	// A handler that swallowed an SQL error leaves the transaction aborted:
	// its outcome cannot be committed, so it counts as a failure.
	if err == nil || isSkipOrSnooze(err) {
		if b.state.saved && b.tx.Conn().PgConn().TxStatus() == 'E' {
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
	if b.state.saved {
		if res.Outcome == Failed || res.Outcome == Parked || res.Outcome == Abandoned {
			b.rollbackHandler(ctx)
		} else {
			b.state.releasePending = true
		}
		b.state.saved = false
	}
	return res
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

// classify maps a handler's return value to an outcome and a delay.
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

// finish writes every outcome of the batch in one statement.
func (q *Queue) finish(ctx context.Context, tx pgx.Tx, results []Result) error {
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
		_, err = tx.Exec(ctx, q.sql.finishLocked, q.name, q.interval, starts, statuses, fences, attempts, failures, messages, delays, data,
			events, q.opts.Owner, owners, held)
	}
	if err != nil {
		return fmt.Errorf("acquire: record outcomes: %w", err)
	}
	return nil
}

// outcomeColumns returns the values a result writes: status, fail_count (-1
// keeps the current one), message, delay in microseconds (nil: none,
// negative: parked) and checkpoint data (nil: keep).
func outcomeColumns(r Result) (status string, failCount int, message *string, delay *int64, data *string, err error) {
	us := func(d time.Duration) *int64 { v := d.Microseconds(); return &v }
	text := func(s string) *string {
		if len(s) > maxMessage {
			s = s[:maxMessage]
		}
		return &s
	}
	switch r.Outcome {
	case Completed:
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
		return "AVAILABLE", -1, nil, us(r.Delay), r.saved, nil
	case Failed:
		return "AVAILABLE", r.Slot.FailCount + 1, text(r.Err.Error()), us(r.Delay), nil, nil
	case Parked:
		parked := int64(-1)
		return "AVAILABLE", r.Slot.FailCount + 1, text("gave up after " + fmt.Sprint(r.Slot.FailCount+1) + " failures: " + r.Err.Error()), &parked, nil, nil
	}
	return "", 0, nil, nil, nil, fmt.Errorf("acquire: no columns for outcome %q", r.Outcome)
}

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

// recordTimeouts handles a batch whose connection died. Nothing of it can
// commit, and every result is Abandoned, except the failures of handlers
// that overran MaxWork: cancelling their statements may itself have closed
// the connection (pgx's default on cancellation), and a slot that always
// overruns must still count its failures and back off instead of running
// again at once for ever. Those are recorded in a new transaction, guarded
// by the fence the slot had when this batch took it and skipped if another
// worker holds the slot by now (or takes it within two seconds).
func (q *Queue) recordTimeouts(ctx context.Context, results []Result, cause error) ([]Result, error) {
	var err error
	for i, r := range results {
		if !r.timedOut || (r.Outcome != Failed && r.Outcome != Parked) {
			results[i].Outcome, results[i].Err = Abandoned, cause
			err = cause
			continue
		}
		_, failCount, message, delay, _, _ := outcomeColumns(r)
		var affected int64
		werr := q.write(ctx, func(b *pgx.Batch) {
			b.Queue(`SELECT set_config('lock_timeout', '2s', true)`)
			b.Queue(q.sql.failOutOfBand, q.name, q.interval, r.Slot.Start, r.Slot.heldFence, r.Slot.Fence,
				r.Slot.Attempt, failCount, message, delay, q.opts.Owner).Exec(func(tag pgconn.CommandTag) error {
				affected = tag.RowsAffected()
				return nil
			})
		})
		if werr != nil || affected == 0 {
			results[i].Outcome, results[i].Err = Abandoned, cause
			err = cause
		}
	}
	return results, err
}

// abandon marks every result as not recorded because of cause.
func abandon(results []Result, cause error) []Result {
	for i := range results {
		results[i].Outcome, results[i].Err = Abandoned, cause
	}
	return results
}

// isRetryable reports the errors after which repeating a statement is the
// right answer: serialization failures and deadlocks.
func isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
