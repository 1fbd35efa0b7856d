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
)

// Lease is a slot held in lease mode: a committed ACQUIRED state with this
// queue's owner id, a fencing token and a deadline. Every write through a
// Lease is guarded by owner and token, so a holder that lost the slot
// (expired and taken over, ejected, re-opened) changes nothing and gets
// ErrLeaseLost. A Lease is safe for concurrent use.
type Lease struct {
	Slot
	q *Queue

	mu       sync.Mutex
	until    time.Time // lease deadline on the database clock, as last written
	lost     chan struct{}
	lostOnce sync.Once
	finished atomic.Bool
}

// Finished reports whether a final write succeeded on this lease: Complete,
// CompleteTx (whose transaction may still roll back), Fail, Skip, Snooze or
// Release.
func (l *Lease) Finished() bool { return l.finished.Load() }

// Until returns the lease deadline (database clock) as last written by a
// claim or an extension.
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Lost returns a channel closed once the lease is known to be lost: a
// guarded write or a heartbeat found the slot no longer ours.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Context returns a context derived from parent that is cancelled, with
// cause ErrLeaseLost, when the lease is lost. Run the lease's work under it.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-l.lost:
			cancel(ErrLeaseLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Claim acquires up to n slots in lease mode with one statement: acquirable
// ones, and ACQUIRED ones whose lease expired (a takeover: TookOver is set).
// Each gets this queue's owner, a new fencing token and a lease of
// Options.LeaseTTL; the claim is committed before Claim returns. Keep the
// leases alive with Extend or KeepAlive, and end each with one of its
// guarded writes. It returns no leases and no error when nothing is
// acquirable.
func (q *Queue) Claim(ctx context.Context, n int) ([]*Lease, error) {
	if n < 1 {
		return nil, fmt.Errorf("acquire: claim %d: expected at least 1", n)
	}
	var leases []*Lease
	err := q.write(ctx, func(b *pgx.Batch) {
		leases = leases[:0]
		b.Queue(q.sql.claim, q.name, q.interval, n, q.from, q.to, q.opts.Owner, q.opts.LeaseTTL.Microseconds()).
			Query(func(rows pgx.Rows) error {
				var err error
				leases, err = q.scanLeases(rows)
				return err
			})
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: claim: %w", err)
	}
	sort.Slice(leases, func(i, j int) bool {
		if q.opts.NewestFirst {
			return leases[i].Start.After(leases[j].Start)
		}
		return leases[i].Start.Before(leases[j].Start)
	})
	return leases, nil
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
		err = q.write(ctx, func(b *pgx.Batch) {
			leases = leases[:0]
			b.Queue(q.sql.eject, q.name, q.interval, start, q.opts.Owner, q.opts.LeaseTTL.Microseconds()).
				Query(func(rows pgx.Rows) error {
					var err error
					leases, err = q.scanLeases(rows)
					return err
				})
		})
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
	return leases[0], nil
}

func (q *Queue) scanLeases(rows pgx.Rows) ([]*Lease, error) {
	var out []*Lease
	var r slotRow
	var until time.Time
	dest := append(r.dest(), &until)
	_, err := pgx.ForEachRow(rows, dest, func() error {
		out = append(out, &Lease{Slot: r.slot(q), q: q, until: until, lost: make(chan struct{})})
		return nil
	})
	return out, err
}

// Complete marks the slot COMPLETE. It returns ErrLeaseLost, and changes
// nothing, if the lease was lost.
func (l *Lease) Complete(ctx context.Context) error {
	return l.guarded(ctx, "complete", l.q.sql.complete)
}

// CompleteTx marks the slot COMPLETE inside tx, the caller's transaction, so
// the caller's writes and the completion commit together or not at all: the
// exactly-once path for effects in the same database. On ErrLeaseLost the
// caller must roll tx back. Calling it before the caller's writes keeps the
// row locked from then on, so no takeover can land in between.
func (l *Lease) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, l.q.sql.complete, l.guardArgs()...)
	if err != nil {
		return fmt.Errorf("acquire: complete: %w", err)
	}
	if tag.RowsAffected() == 0 {
		l.markLost()
		return fmt.Errorf("acquire: complete %s: %w", l.Slot, ErrLeaseLost)
	}
	l.finished.Store(true)
	return nil
}

// Fail records a failure of the slot's work: fail_count grows, err's text
// becomes the message, and the retry policy decides when the slot is
// acquirable again, or parks it. It returns Failed (with the delay) or
// Parked.
func (l *Lease) Fail(ctx context.Context, err error) (Outcome, time.Duration, error) {
	outcome, delay, _ := l.q.classify(l.Slot, err)
	res := Result{Slot: l.Slot, Outcome: outcome, Err: err, Delay: delay}
	_, failCount, message, delayUS, _, _ := outcomeColumns(res)
	return outcome, delay, l.guarded(ctx, "fail", l.q.sql.fail, failCount, message, delayUS)
}

// Skip marks the slot SKIP with reason.
func (l *Lease) Skip(ctx context.Context, reason string) error {
	return l.guarded(ctx, "skip", l.q.sql.skip, reason)
}

// Snooze gives the slot back as AVAILABLE, to be acquired again after d
// (database clock), without counting a failure; data, when not nil, is
// saved as its checkpoint (JSON).
func (l *Lease) Snooze(ctx context.Context, d time.Duration, data any) error {
	saved, err := marshalData(data)
	if err != nil {
		return err
	}
	return l.guarded(ctx, "snooze", l.q.sql.snooze, max(d, 0).Microseconds(), saved)
}

// Release gives the slot back as AVAILABLE at once, keeping its checkpoint:
// what a worker does with its leases when it shuts down.
func (l *Lease) Release(ctx context.Context) error {
	return l.guarded(ctx, "release", l.q.sql.release)
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
	return l.guarded(ctx, "checkpoint", l.q.sql.checkpoint, saved)
}

// Extend renews the lease for Options.LeaseTTL from now (database clock).
func (l *Lease) Extend(ctx context.Context) error {
	lost, err := l.q.Extend(ctx, []*Lease{l})
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
// ErrLeaseLost.
func (l *Lease) guarded(ctx context.Context, what, sql string, extra ...any) error {
	final := what != "checkpoint"
	var affected int64
	err := l.q.write(ctx, func(b *pgx.Batch) {
		b.Queue(sql, l.guardArgs(extra...)...).Exec(func(tag pgconn.CommandTag) error {
			affected = tag.RowsAffected()
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("acquire: %s: %w", what, err)
	}
	if affected == 0 {
		l.markLost()
		return fmt.Errorf("acquire: %s %s: %w", what, l.Slot, ErrLeaseLost)
	}
	if final {
		l.finished.Store(true)
	}
	return nil
}

// Extend renews many leases of this queue with one statement and returns
// the ones found lost (their Lost channels are closed). A lease whose row
// another transaction has locked at that moment is neither renewed nor
// lost: it is tried again at the next extension, rather than making the
// others wait.
func (q *Queue) Extend(ctx context.Context, leases []*Lease) (lost []*Lease, err error) {
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
	kept := map[time.Time]*time.Time{} // nil: ours, but busy (extend only)
	err := q.write(ctx, func(b *pgx.Batch) {
		clear(kept)
		var args []any
		if extend {
			args = []any{q.name, q.interval, starts, q.opts.Owner, q.opts.LeaseTTL.Microseconds(), fences}
		} else {
			args = []any{q.name, q.interval, starts, q.opts.Owner, fences}
		}
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			var start time.Time
			var until *time.Time
			dest := []any{&start}
			if extend {
				dest = append(dest, &until)
			}
			_, err := pgx.ForEachRow(rows, dest, func() error {
				kept[start.UTC()] = until
				return nil
			})
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("acquire: %s: %w", what, err)
	}
	var lost []*Lease
	for _, l := range leases {
		until, ok := kept[l.Start.UTC()]
		if !ok {
			l.markLost()
			lost = append(lost, l)
			continue
		}
		if extend {
			if until != nil {
				l.mu.Lock()
				l.until = *until
				l.mu.Unlock()
			}
		} else {
			l.finished.Store(true)
		}
	}
	return lost, nil
}

// KeepAlive extends leases every LeaseTTL/3 until stop is called or ctx is
// done. Leases found lost have their Lost channels closed (and their
// Context cancelled); a failed extension is retried at the next tick, and
// only a lease whose deadline passes unextended can be taken over.
func (q *Queue) KeepAlive(ctx context.Context, leases []*Lease) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(q.opts.LeaseTTL / 3)
		defer t.Stop()
		live := append([]*Lease(nil), leases...)
		for len(live) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			lost, err := q.Extend(ctx, live)
			if err != nil {
				if ctx.Err() == nil {
					q.opts.Logger.Warn("almanac: lease heartbeat failed", "series", q.name, "error", err)
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

// settings neutralizes role defaults that would break a write: a short
// statement or lock timeout, or an idle-in-transaction timeout. It also
// marks the transaction as almanac's own (almanac.engine), which the slot
// table's plain-SQL triggers skip.
const settings = `SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true),
    set_config('idle_in_transaction_session_timeout', '0', true), set_config('almanac.engine', 'on', true)`

// write runs the statements queued by build in one READ COMMITTED
// transaction, begun, configured and committed in the same round trip.
// Serialization failures and deadlocks are retried a few times.
func (q *Queue) write(ctx context.Context, build func(b *pgx.Batch)) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
			}
		}
		err = q.writeOnce(ctx, build)
		if !isRetryable(err) {
			return err
		}
	}
	return err
}

func (q *Queue) writeOnce(ctx context.Context, build func(b *pgx.Batch)) error {
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue(settings)
	build(b)
	b.Queue("COMMIT")
	err = conn.SendBatch(ctx, b).Close()
	if err != nil && conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		// The statement failed inside the explicit transaction: end it here
		// so the connection goes back to the pool clean.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return err
}
