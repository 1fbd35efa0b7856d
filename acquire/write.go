package acquire

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/retry"
)

// settings neutralizes role defaults that would break a write: a short
// statement or lock timeout, or an idle-in-transaction timeout. It also
// marks the transaction as almanac's own (almanac.engine), which the slot
// table's plain-SQL triggers skip.
const settings = `SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true),
    set_config('idle_in_transaction_session_timeout', '0', true), set_config('almanac.engine', 'on', true)`

// runOwner names the queue's owner ($1) as the run whose outcomes the rest
// of the transaction writes, for the slot table's trigger, which records
// them (slot_record, migration 11): in locked mode the owner is on no row.
// The statements that end a locked-mode transaction set it themselves (the
// runOwner fragment), in the same round trip.
const runOwner = `SELECT set_config('almanac.owner', $1::text, true)`

// shortLockWait bounds, for the rest of its transaction, how long a write
// waits for a row another transaction holds: for the writes that may meet
// a transaction that is slow to end (a dead locked-mode backend) or never
// ends (one a handler left open).
const shortLockWait = `SELECT set_config('lock_timeout', '2s', true)`

// write runs the statements queued by build in one READ COMMITTED
// transaction, begun, configured and committed in the same round trip, and
// repeats it after a transient fault (a lost connection, a serialization
// failure, a deadlock) until it succeeds or ctx ends. build is called again
// for every attempt, so it must reset whatever its callbacks collect. Every
// statement of the queue's own goes through it (the reads that decide a
// write too), so that none runs at the isolation level a role defaults to:
// under SERIALIZABLE, draws from the series' frontier that met on its row
// failed with 40001.
//
// uncertain reports that an attempt failed after its COMMIT may have been
// processed (the connection was lost mid-way): a repeated guarded write then
// finds nothing to change when the lost attempt did commit, and the caller
// must look at the row to tell (see landed).
func (q *Queue) write(ctx context.Context, build func(b *pgx.Batch)) (uncertain bool, err error) {
	err = retry.Do(ctx, func(ctx context.Context) error {
		err := q.writeOnce(ctx, build)
		if retry.MayHaveCommitted(ctx, err) {
			uncertain = true
		}
		return err
	})
	return uncertain, err
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
	if err == nil && q.testLoseAck != nil && q.testLoseAck() {
		return &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection (the test lost the acknowledgment)"}
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "25006" {
		// The server refused the write as read-only: a primary being
		// demoted or fenced. The next attempt dials afresh, so that it
		// follows the promoted primary (target_session_attrs=read-write)
		// and takes the server's settings as they are then, not as this
		// session took them when it began.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		return err
	}
	if err != nil && conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		// The statement failed inside the explicit transaction: end it here
		// so the connection goes back to the pool clean.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return err
}

// landed returns the leases among ls whose slot is in status with their
// fencing token and no holder: a final write of theirs committed even
// though its acknowledgment was lost. The token is unique to one
// acquisition, so only the lease's own final write (or an operator's plain
// SQL in between, which the caller cannot tell apart) leaves that state.
func (q *Queue) landed(ctx context.Context, ls []*Lease, status string) (map[*Lease]bool, error) {
	starts := make([]time.Time, len(ls))
	fences := make([]int64, len(ls))
	for i, l := range ls {
		starts[i], fences[i] = l.Start, l.Fence
	}
	found := map[time.Time]bool{}
	_, err := q.write(ctx, func(b *pgx.Batch) {
		clear(found)
		b.Queue(q.sql.landed, q.name, q.interval, starts, fences, status).Query(func(rows pgx.Rows) error {
			var start time.Time
			_, err := pgx.ForEachRow(rows, []any{&start}, func() error { found[start.UTC()] = true; return nil })
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	out := map[*Lease]bool{}
	for _, l := range ls {
		if found[l.Start.UTC()] {
			out[l] = true
		}
	}
	return out, nil
}
