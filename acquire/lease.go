package acquire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/retry"
)

// LeaseHandler does the work of one slot in lease mode. It returns what a
// Handler returns: nil to complete the slot (unless it completed it itself,
// with Lease.CompleteTx, to commit its own writes with the completion: if
// that transaction did not commit, a failure is recorded that says so),
// Skip or Snooze, or an error to record a failure (see Lease.Finish). Its
// context should be the lease's (Lease.Context), cancelled when the lease
// is lost; the scheduler of the root package also cancels it on shutdown,
// and then releases the lease with its checkpoint.
type LeaseHandler func(ctx context.Context, l *Lease) error

// Lease is a slot held in lease mode: a committed ACQUIRED state with this
// queue's owner id, a fencing token and a deadline. Every write through a
// Lease is guarded by owner and token, so a holder that lost the slot
// (expired and taken over, ejected, re-opened) changes nothing and gets
// ErrLeaseLost. A Lease is safe for concurrent use.
//
// A holder that cannot renew its lease (the database is unreachable) gives
// it up by its own reckoning before it can expire: see Deadline.
type Lease struct {
	Slot
	q *Queue

	mu       sync.Mutex
	until    time.Time     // lease deadline on the database clock, as last written
	at       pgtype.TID    // the address of the row version last written (see CompleteTx); invalid: unknown
	deadline time.Time     // when this holder stops trusting the lease (local, monotonic)
	moved    chan struct{} // closed and replaced whenever deadline moves
	lost     chan struct{}
	lostErr  error // why the lease was lost; set before lost is closed
	lostOnce sync.Once
	finished atomic.Bool // a final write of the lease's own committed: Finish or Release
	// inTx: CompleteTx completed the slot in the caller's transaction,
	// which may yet roll back or never commit (see Finish).
	inTx atomic.Bool
}

// isFinished reports whether a final write succeeded on this lease: Finish
// or Release, or CompleteTx, whose transaction may yet roll back.
func (l *Lease) isFinished() bool { return l.finished.Load() || l.inTx.Load() }

// Until returns the lease deadline (database clock) as last written by a
// claim or an extension.
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Deadline returns when this holder stops trusting its lease, on the local
// monotonic clock: the time the last successful claim or renewal was sent,
// plus LeaseTTL, less 1 % of LeaseTTL for the clocks of this host and the
// database running at different rates, less Policy.StopBefore for the work
// to stop. The database cannot extend the lease before that statement
// arrived, so until Deadline the lease cannot have expired, whatever the
// network does; past it, Context is cancelled even when the database cannot
// be asked (a partition), so that the work stops before another worker can
// take the slot over.
//
// What this cannot cover is a process that is paused (SIGSTOP, a VM
// stalled) past the deadline and resumes in the middle of its work: only
// the fencing token protects the effects of such a holder, which is why
// every write of a Lease and every external write should carry it.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// renewed moves the deadline after a claim or an extension sent at sent
// committed, with until as the new deadline on the database clock and at
// the address of the row version it wrote.
func (l *Lease) renewed(sent, until time.Time, at pgtype.TID) {
	ttl := l.q.opts.LeaseTTL
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until, l.at = until, at
	if d := sent.Add(ttl - ttl/100 - l.q.opts.StopBefore); d.After(l.deadline) {
		l.deadline = d
		close(l.moved)
		l.moved = make(chan struct{})
	}
}

// markLost records that the lease is lost because of cause (wrapping
// ErrLeaseLost) and closes l.lost, which cancels the lease's Context.
func (l *Lease) markLost(cause error) {
	l.lostOnce.Do(func() {
		if !errors.Is(cause, errNotRenewed) {
			// A guarded write or a heartbeat found the slot no longer
			// this holder's: its write was refused.
			l.q.opts.Logger.Error("almanac: write refused: the slot is no longer this holder's (expired and taken over, ejected or re-opened)",
				l.q.logArgs(l.Slot, "error", cause)...)
		}
		if errors.Is(cause, errNotRenewed) {
			// Given up by its holder, maybe still held in the database:
			// tracked until the holder drops it, then an orphan.
		} else {
			l.q.leases.untrack(l)
		}
		l.mu.Lock()
		l.lostErr = cause
		l.mu.Unlock()
		close(l.lost)
	})
}

// lostCause returns why the lease was lost, once it is.
func (l *Lease) lostCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		return ErrLeaseLost
	}
	return l.lostErr
}

// expireIfDue gives the lease up when its Deadline has passed without a
// final write, and reports whether it did.
func (l *Lease) expireIfDue(now time.Time) bool {
	l.mu.Lock()
	due := !now.Before(l.deadline)
	deadline := l.deadline
	l.mu.Unlock()
	if !due || l.isFinished() {
		return false
	}
	l.markLost(fmt.Errorf("%w: %w (stopped at %s, before the lease can expire)",
		ErrLeaseLost, errNotRenewed, deadline.Format(time.RFC3339Nano)))
	return true
}

// errNotRenewed is why a lease its holder could not renew in time was
// given up.
var errNotRenewed = errors.New("not renewed in time")

// finish records that a final write of the lease succeeded.
func (l *Lease) finish() {
	l.finished.Store(true)
	l.q.leases.untrack(l)
}

// Context returns a context derived from parent that is cancelled, with a
// cause wrapping ErrLeaseLost, when the lease is lost or its Deadline
// passes unrenewed. Run the lease's work under it.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		for {
			l.mu.Lock()
			wait, moved := time.Until(l.deadline), l.moved
			l.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-l.lost:
				t.Stop()
				cancel(l.lostCause())
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-moved:
				t.Stop()
			case <-t.C:
				if l.expireIfDue(time.Now()) {
					cancel(l.lostCause())
					return
				}
				if l.isFinished() {
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Claim acquires up to n slots in lease mode with one statement: acquirable
// ones, and ACQUIRED ones whose lease expired (a takeover: TookOver is set).
// An oldest-first queue searches from the earliest slot its last
// acquisition took, and with a second statement before it when the first
// finds fewer than n (see Rewind).
// Each gets this queue's owner, a new fencing token and a lease of
// Policy.LeaseTTL; the claim is committed before Claim returns. Keep the
// leases alive with KeepAlive (or Extend), and end each with Finish,
// CompleteTx or Release. It returns no leases and no error when nothing is
// acquirable.
//
// A claim is repeated after a transient fault. When the connection was lost
// while the claim committed, the slots it claimed are held by this owner
// without a Lease to show for it: they are taken over once their lease
// expires, like a crashed holder's.
func (q *Queue) Claim(ctx context.Context, n int) ([]*Lease, error) {
	if n < 1 {
		return nil, fmt.Errorf("acquire: claim %d: expected at least 1", n)
	}
	lo, epoch := q.searchFrom(ctx, n)
	leases, err := q.claimIn(ctx, n, lo, q.to, true)
	if err != nil {
		return nil, err
	}
	whole, short := !lo.After(q.from), len(leases) < n
	if short && !whole {
		// Short: look behind the floor too. Leases already claimed are
		// returned whatever happens to this second look.
		more, err := q.claimIn(ctx, n-len(leases), q.from, lo, false)
		if err != nil && len(leases) == 0 {
			return nil, err
		}
		if err == nil {
			whole = true
			leases = append(leases, more...)
		}
	}
	q.floor.advance(epoch, lo, leaseSlots(leases), whole, short)
	q.afterSearch(leaseSlots(leases), n, whole, short)
	sort.Slice(leases, func(i, j int) bool {
		if q.opts.NewestFirst {
			return leases[i].Start.After(leases[j].Start)
		}
		return leases[i].Start.Before(leases[j].Start)
	})
	return leases, nil
}

// claimIn claims up to n slots: AVAILABLE slots in [lo, hi), and with
// takeovers expired leases of the whole range.
func (q *Queue) claimIn(ctx context.Context, n int, lo, hi time.Time, takeovers bool) ([]*Lease, error) {
	from, to := q.expiredIn(takeovers)
	var leases []*Lease
	q.leases.claiming.RLock()
	c := q.controls(ctx, q.pool)
	claim := q.sql.claim[c.variant()]
	uncertain, err := q.write(ctx, func(b *pgx.Batch) {
		leases = leases[:0]
		sent := time.Now()
		if c.capped {
			// Admissions to a series with a cap happen one at a time: the
			// claim counts what is held once the lock is granted.
			b.Queue(q.sql.lockSeries, q.name, q.interval)
		}
		b.Queue(claim, q.name, q.interval, n, from, to, q.opts.Owner, q.opts.LeaseTTL.Microseconds(), q.opts.Lag.Microseconds(),
			q.opts.TakeoverGrace.Microseconds(), lo, hi).
			Query(func(rows pgx.Rows) error {
				var err error
				leases, err = q.scanLeases(rows, sent)
				return err
			})
	})
	for _, l := range leases {
		q.leases.track(l)
	}
	q.leases.claiming.RUnlock()
	if uncertain && err == nil {
		q.releaseOrphans(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("acquire: claim: %w", err)
	}
	return leases, nil
}

func leaseSlots(leases []*Lease) []Slot {
	slots := make([]Slot, len(leases))
	for i, l := range leases {
		slots[i] = l.Slot
	}
	return slots
}

// Eject takes the slot starting at start over now, whoever holds its lease
// (the "a callback arrived, act at once" case): it gets this queue's owner,
// a new fencing token and a fresh lease, and the previous holder's next
// guarded write fails with ErrLeaseLost. An acquirable slot is simply
// claimed. It fails with ErrHeld when a locked-mode transaction holds the
// slot, and ErrNotHeld when the slot is COMPLETE, SKIP or missing.
func (q *Queue) Eject(ctx context.Context, start time.Time) (*Lease, error) {
	var leases []*Lease
	var err error
	var pgErr *pgconn.PgError
	// A lease write or claim locks the row for milliseconds; a locked-mode
	// transaction for the whole job. Retrying NOWAIT for about half a second
	// tells the two apart without ever queueing behind a long holder.
	for wait := 5 * time.Millisecond; ; wait *= 2 {
		q.leases.claiming.RLock()
		_, err = q.write(ctx, func(b *pgx.Batch) {
			leases = leases[:0]
			sent := time.Now()
			b.Queue(q.sql.eject, q.name, q.interval, start, q.opts.Owner, q.opts.LeaseTTL.Microseconds()).
				Query(func(rows pgx.Rows) error {
					var err error
					leases, err = q.scanLeases(rows, sent)
					return err
				})
		})
		for _, l := range leases {
			q.leases.track(l)
		}
		q.leases.claiming.RUnlock()
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || wait > 320*time.Millisecond {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03":
		return nil, fmt.Errorf("acquire: eject %s: %w", start.Format(time.RFC3339), ErrHeld)
	case err != nil:
		return nil, fmt.Errorf("acquire: eject: %w", err)
	case len(leases) == 0:
		return nil, fmt.Errorf("acquire: eject %s: %w", start.Format(time.RFC3339), ErrNotHeld)
	}
	q.opts.Logger.Warn("almanac: slot ejected: taken over now, whoever held it", q.logArgs(leases[0].Slot)...)
	return leases[0], nil
}

// logArgs are the log attributes of an acquisition of this queue's,
// followed by extra.
func (q *Queue) logArgs(s Slot, extra ...any) []any {
	return append([]any{"series", q.name, "interval", q.interval, "slot", s.Slot.String(), "owner", q.opts.Owner.String(),
		"attempt", s.Attempt, "generation", s.Generation, "fence", s.Fence}, extra...)
}

// scanLeases reads the leases a claim sent at sent returned.
func (q *Queue) scanLeases(rows pgx.Rows, sent time.Time) ([]*Lease, error) {
	var out []*Lease
	var r slotRow
	var until time.Time
	var at pgtype.TID
	dest := append(r.dest(), &until, &at)
	_, err := pgx.ForEachRow(rows, dest, func() error {
		s, err := r.slot(q)
		if err != nil {
			return err
		}
		l := &Lease{Slot: s, q: q, lost: make(chan struct{}), moved: make(chan struct{})}
		l.renewed(sent, until, at)
		out = append(out, l)
		return nil
	})
	return out, err
}

// Finish records the outcome err stands for, as a handler's return value
// does in locked mode:
//
//   - nil completes the slot, unless a final write already succeeded on the
//     lease (an earlier Finish or Release): then it writes nothing. After
//     CompleteTx it checks that the transaction CompleteTx was called in
//     committed; if it did not (it rolled back, its COMMIT failed, or it was
//     left open), it records a failure saying so, which counts toward
//     MaxAttempts, and returns Failed or Parked;
//   - the error of Skip marks it SKIP with the reason;
//   - the error of Snooze gives it back for that long, with its data as the
//     checkpoint, not counted as a failure;
//   - any other error records a failure: fail_count grows, the error's text
//     becomes the message, and the retry policy decides when the slot is
//     acquirable again, or parks it. A database fault (a lost connection, a
//     restarting server) is not held against the slot: it is tried again in
//     a second, its fail_count unchanged (Snoozed).
//
// After CompleteTx, whatever err is, a slot that transaction completed is
// Completed. Finish returns the outcome recorded and, for Snoozed and
// Failed, the delay before the slot is acquirable again. Like every final
// write of a Lease, it is repeated across lost connections until it is
// known to have committed, or ctx ends: a write whose acknowledgment was
// lost is recognised, not reported as a lost lease. It returns an error
// wrapping ErrLeaseLost, and changes nothing, when the slot is no longer
// this holder's.
func (l *Lease) Finish(ctx context.Context, err error) (Outcome, time.Duration, error) {
	if l.inTx.Load() {
		switch done, cerr := l.completedInTx(ctx); {
		case cerr != nil:
			return Completed, 0, cerr
		case done:
			return Completed, 0, nil
		case err == nil && !l.finished.Load():
			err = errTxNotCommitted
		}
	}
	outcome, delay, _ := l.q.classify(l.Slot, err)
	switch {
	case outcome == Completed:
		if l.finished.Load() {
			return Completed, 0, nil
		}
		return Completed, 0, l.complete(ctx)
	case outcome == Skipped:
		var skip *SkipError
		errors.As(err, &skip)
		return Skipped, 0, l.guarded(ctx, "skip", statusSkip, l.q.sql.skip, boundText(skip.Reason))
	}
	var snooze *SnoozeError
	if outcome == Snoozed && errors.As(err, &snooze) {
		saved, merr := marshalData(snooze.Data)
		if merr != nil {
			return Snoozed, delay, merr
		}
		return Snoozed, delay, l.guarded(ctx, "snooze", statusAvailable, l.q.sql.snooze, delay.Microseconds(), saved, nil)
	}
	res := Result{Slot: l.Slot, Outcome: outcome, Err: err, Delay: delay}
	_, failCount, message, delayUS, _, _ := outcomeColumns(res)
	if outcome == Snoozed {
		return outcome, delay, l.guarded(ctx, "snooze", statusAvailable, l.q.sql.snooze, delayUS, nil, message)
	}
	return outcome, delay, l.guarded(ctx, "fail", statusAvailable, l.q.sql.fail, failCount, message, delayUS)
}

// complete marks the slot COMPLETE, with the completions of other leases
// of the queue when Options.CompletionWindow is set.
func (l *Lease) complete(ctx context.Context) error {
	if l.q.merge == nil {
		return l.guarded(ctx, "complete", statusComplete, l.q.sql.complete)
	}
	for {
		// A merged write gives up on its batch after a while; the lease's
		// own deadline for recording is ctx's.
		err := l.q.merge.complete(ctx, l)
		if err == nil || !retry.Transient(ctx, err) || l.isFinished() {
			return err
		}
	}
}

// CompleteTx marks the slot COMPLETE inside tx, the caller's transaction, so
// the caller's writes and the completion commit together or not at all: the
// exactly-once path for effects in the same database. On ErrLeaseLost the
// caller must roll tx back. Calling it before the caller's writes keeps the
// row locked from then on, so no takeover can land in between, and no
// heartbeat: a heartbeat leaves a row it cannot lock alone.
//
// The transaction's isolation level is the caller's. Under READ COMMITTED
// (PostgreSQL's default) the guard is tested on the row as it is when
// CompleteTx runs. Under REPEATABLE READ and SERIALIZABLE it is tested on
// the transaction's snapshot, taken at its first statement: begin tx after
// the lease was claimed, or CompleteTx finds the slot as it was before and
// returns ErrLeaseLost, and call CompleteTx first, because a change of the
// row since the snapshot (a heartbeat as much as a takeover) makes it fail
// with a serialization failure (SQLSTATE 40001), after which the caller
// retries its transaction, as serializable transactions must. The
// completion reads the row by its address, not through an index, so it
// takes no predicate lock that the completions of other slots conflict
// with: serializable transactions that complete neighbouring slots fail
// only for what their own statements read and write.
func (l *Lease) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	var affected int64
	if at := l.address(); at.Valid {
		tag, err := tx.Exec(ctx, l.q.sql.completeTx, l.guardArgs(at)...)
		if err != nil {
			return fmt.Errorf("acquire: complete: %w", err)
		}
		affected = tag.RowsAffected()
	}
	if affected == 0 {
		// The row has moved since (a checkpoint, a heartbeat whose reply
		// is on its way), or the lease is lost: by the key.
		tag, err := tx.Exec(ctx, l.q.sql.complete, l.guardArgs()...)
		if err != nil {
			return fmt.Errorf("acquire: complete: %w", err)
		}
		affected = tag.RowsAffected()
	}
	if affected == 0 {
		err := fmt.Errorf("acquire: complete %s: %w", l.Slot, ErrLeaseLost)
		l.markLost(err)
		return err
	}
	// Still tracked: tx may yet roll back, and the lease be worked on.
	l.inTx.Store(true)
	return nil
}

// errTxNotCommitted is the failure Finish records for a lease whose
// handler called CompleteTx and returned nil, when that transaction did not
// commit: without it, the slot stayed ACQUIRED until its lease expired and
// was taken over, again and again, with nothing recorded and no attempt
// counted toward MaxAttempts.
var errTxNotCommitted = errors.New("CompleteTx was called but its transaction did not commit")

// completedInTx reports whether the completion CompleteTx wrote committed:
// the slot is COMPLETE with this lease's token.
func (l *Lease) completedInTx(ctx context.Context) (bool, error) {
	done, err := l.q.landed(ctx, []*Lease{l}, statusComplete)
	if err != nil {
		return false, fmt.Errorf("acquire: complete %s: checking the transaction CompleteTx was called in: %w", l.Slot, err)
	}
	if done[l] {
		l.finish()
	}
	return done[l], nil
}

// Release gives the slot back as AVAILABLE at once, keeping its checkpoint:
// what a worker does with its leases when it shuts down.
func (l *Lease) Release(ctx context.Context) error {
	return l.guarded(ctx, "release", statusAvailable, l.q.sql.release)
}

// Checkpoint saves data (JSON) on the slot, where the next holder finds it
// as Slot.Data if this one does not finish.
func (l *Lease) Checkpoint(ctx context.Context, data any) error {
	saved, err := marshalData(data)
	if err != nil {
		return err
	}
	if saved == nil {
		return errors.New("acquire: checkpoint: data is nil")
	}
	if err := l.guarded(ctx, "checkpoint", "", l.q.sql.checkpoint, saved); err != nil {
		return err
	}
	// The row has moved; the next heartbeat says where to.
	l.mu.Lock()
	l.at = pgtype.TID{}
	l.mu.Unlock()
	return nil
}

// address returns the address of the row version the lease last wrote:
// invalid when unknown.
func (l *Lease) address() pgtype.TID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at
}

// Extend renews the lease for Policy.LeaseTTL from now (database clock).
func (l *Lease) Extend(ctx context.Context) error {
	lost, err := l.q.extend(ctx, []*Lease{l})
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return fmt.Errorf("acquire: extend %s: %w", l.Slot, ErrLeaseLost)
	}
	return nil
}

func (l *Lease) guardArgs(extra ...any) []any {
	return append([]any{l.q.name, l.q.interval, l.Start, l.q.opts.Owner, l.Fence}, extra...)
}

// guarded runs one fenced write and turns "no row matched" into
// ErrLeaseLost. A final write (to status; "" for the checkpoint, which
// changes no state) that was repeated after a connection lost mid-way may
// find its own earlier attempt committed: the row then shows status with
// this lease's token, and that is success.
func (l *Lease) guarded(ctx context.Context, what, status, sql string, extra ...any) error {
	var affected int64
	afterTx := l.inTx.Load()
	uncertain, err := l.q.write(ctx, func(b *pgx.Batch) {
		if afterTx {
			// The transaction CompleteTx was called in may hold the row, and
			// a handler may have left it open: not worth waiting for long.
			b.Queue(shortLockWait)
		}
		b.Queue(sql, l.guardArgs(extra...)...).Exec(func(tag pgconn.CommandTag) error {
			affected = tag.RowsAffected()
			return nil
		})
	})
	if pgErr := (*pgconn.PgError)(nil); afterTx && errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return fmt.Errorf("acquire: %s %s: the transaction CompleteTx was called in still holds the slot's row (was it left open?): %w", what, l.Slot, err)
	}
	if err != nil {
		return fmt.Errorf("acquire: %s %s: %w", what, l.Slot, err)
	}
	if affected == 0 && uncertain && status != "" {
		done, err := l.q.landed(ctx, []*Lease{l}, status)
		if err != nil {
			return fmt.Errorf("acquire: %s %s: checking a write whose connection was lost: %w", what, l.Slot, err)
		}
		affected = int64(len(done))
	}
	if affected == 0 {
		err := fmt.Errorf("acquire: %s %s: %w", what, l.Slot, ErrLeaseLost)
		l.markLost(err)
		return err
	}
	if status != "" {
		l.finish()
	}
	if status == statusAvailable {
		l.q.floor.rewind()
	}
	return nil
}

// extend renews many leases of this queue with one statement and returns
// the ones found lost (their contexts are cancelled). A lease whose row
// another transaction has locked at that moment is neither renewed nor
// lost: it is tried again at the next extension, rather than making the
// others wait.
func (q *Queue) extend(ctx context.Context, leases []*Lease) (lost []*Lease, err error) {
	return q.many(ctx, "extend", q.sql.extend, leases, true)
}

// CompleteMany marks many leases COMPLETE with one statement and returns
// the ones found lost, which it did not change.
func (q *Queue) CompleteMany(ctx context.Context, leases []*Lease) (lost []*Lease, err error) {
	return q.many(ctx, "complete", q.sql.completeMany, leases, false)
}

func (q *Queue) many(ctx context.Context, what, sql string, leases []*Lease, extend bool) ([]*Lease, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	starts := make([]time.Time, len(leases))
	fences := make([]int64, len(leases))
	for i, l := range leases {
		starts[i], fences[i] = l.Start, l.Fence
	}
	type renewal struct {
		until *time.Time // nil: ours, but busy (extend only)
		at    pgtype.TID
	}
	kept := map[time.Time]renewal{}
	var sent time.Time
	uncertain, err := q.write(ctx, func(b *pgx.Batch) {
		clear(kept)
		sent = time.Now()
		args := []any{q.name, q.interval, starts, q.opts.Owner, fences}
		if extend {
			args = append(args, q.opts.LeaseTTL.Microseconds())
		}
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			var start time.Time
			var r renewal
			dest := []any{&start}
			if extend {
				dest = append(dest, &r.until, &r.at)
			}
			_, err := pgx.ForEachRow(rows, dest, func() error {
				kept[start.UTC()] = r
				return nil
			})
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: %s: %w", what, err)
	}
	var missing []*Lease
	for _, l := range leases {
		if _, ok := kept[l.Start.UTC()]; !ok {
			missing = append(missing, l)
		}
	}
	// Missing, but maybe completed by this holder: by this write, whose
	// acknowledgment was lost, or, for a heartbeat, by CompleteTx in a
	// transaction that has committed since.
	var check []*Lease
	for _, l := range missing {
		if !extend && uncertain || extend && l.inTx.Load() {
			check = append(check, l)
		}
	}
	done := map[*Lease]bool{}
	if len(check) > 0 {
		if done, err = q.landed(ctx, check, statusComplete); err != nil {
			return nil, fmt.Errorf("acquire: %s: checking the slots it did not find: %w", what, err)
		}
	}
	var lost []*Lease
	for _, l := range leases {
		r, ok := kept[l.Start.UTC()]
		switch {
		case !ok && !done[l]:
			l.markLost(fmt.Errorf("acquire: %s %s: %w", what, l.Slot, ErrLeaseLost))
			lost = append(lost, l)
		case !ok:
			l.finish()
		case extend:
			if r.until != nil {
				l.renewed(sent, *r.until, r.at)
			}
		default:
			l.finish()
		}
	}
	return lost, nil
}

// KeepAlive extends leases every LeaseTTL/3 until stop is called or ctx is
// done. Leases found lost have their Context cancelled. A failed extension
// is logged and tried again at the next tick; a lease that goes unrenewed
// until its Deadline (the database unreachable for about LeaseTTL) is given
// up: its Context is cancelled, so that its work stops before another
// worker may take the slot over.
func (q *Queue) KeepAlive(ctx context.Context, leases []*Lease) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := q.opts.LeaseTTL / 3
		next := time.Now().Add(every)
		live := append([]*Lease(nil), leases...)
		for len(live) > 0 {
			wake := next
			for _, l := range live {
				if d := l.Deadline(); d.Before(wake) {
					wake = d
				}
			}
			t := time.NewTimer(time.Until(wake))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			now := time.Now()
			var expired []*Lease
			for _, l := range live {
				if l.expireIfDue(now) {
					expired = append(expired, l)
					q.opts.Logger.Error("almanac: lease not renewed in time; stopping its work",
						"series", q.name, "interval", q.interval, "slot", l.Slot.Slot.String(), "fence", l.Fence)
				}
			}
			live = without(live, expired)
			if now.Before(next) || len(live) == 0 {
				continue
			}
			next = now.Add(every)
			// A heartbeat never outlives the next one: a connection that
			// hangs is given up, and the next tick tries a fresh one.
			hctx, hcancel := context.WithDeadline(ctx, next)
			lost, err := q.extend(hctx, live)
			hcancel()
			if err != nil {
				if ctx.Err() == nil {
					q.opts.Logger.Warn("almanac: lease heartbeat failed", "series", q.name, "interval", q.interval, "error", err)
				}
				continue
			}
			live = without(live, lost)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func without(all, drop []*Lease) []*Lease {
	if len(drop) == 0 {
		return all
	}
	gone := map[*Lease]bool{}
	for _, l := range drop {
		gone[l] = true
	}
	out := all[:0]
	for _, l := range all {
		if !gone[l] {
			out = append(out, l)
		}
	}
	return out
}

func marshalData(data any) (*string, error) {
	if data == nil {
		return nil, nil
	}
	if raw, ok := data.(json.RawMessage); ok {
		s := string(raw)
		return &s, nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("acquire: checkpoint data: %w", err)
	}
	s := string(b)
	return &s, nil
}

// ErrLeaseLost is returned by every guarded write of a lease (Finish,
// CompleteTx, Release, Checkpoint, Extend) when the slot
// is no longer held by this owner with this fencing token: the lease expired
// and another worker took the slot over, it was ejected, or it was
// re-opened. Nothing was changed. Roll back whatever depends on the lease.
var ErrLeaseLost = errors.New("lease lost")

// ErrHeld is returned by Eject when the slot is held in locked mode by an
// open transaction, which only ending that transaction (or its backend) can
// release.
var ErrHeld = errors.New("slot is held in locked mode")

// ErrNotHeld is returned by Eject when the slot is not held and not
// acquirable: it is COMPLETE, SKIP or missing.
var ErrNotHeld = errors.New("slot is not held or acquirable")
