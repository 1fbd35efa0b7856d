package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CurrentXact is the SQL expression for the running transaction's id, as a
// bigint: select it inside a transaction whose COMMIT might be lost, so
// that Committed can tell afterwards. Taking it assigns the transaction an
// id, which any transaction that writes (or locks rows) has anyway.
const CurrentXact = `pg_current_xact_id()::text::bigint`

// ErrUnknownOutcome is wrapped by Committed when the server cannot say what
// became of a transaction (its id is too old to be tracked).
var ErrUnknownOutcome = errors.New("transaction outcome unknown")

// Querier is what Committed needs: a pool or a connection.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Committed reports whether the transaction xid (read with CurrentXact)
// committed: the answer to a connection lost during COMMIT, where the
// server may or may not have committed before the connection went. It waits
// while the transaction is still in progress (its backend may not have
// noticed the lost connection yet) and retries transient faults like Do.
//
// A transaction id the server has never seen (after a failover to a standby
// that did not receive it) did not commit there, so it reports false.
func Committed(ctx context.Context, q Querier, xid int64) (bool, error) {
	wait := 10 * time.Millisecond
	for {
		var status *string
		err := Do(ctx, func(ctx context.Context) error {
			return q.QueryRow(ctx, `SELECT pg_xact_status($1::text::xid8)`, fmt.Sprint(xid)).Scan(&status)
		})
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "22023": // "transaction ID … is in the future"
			return false, nil
		case err != nil:
			return false, err
		case status == nil:
			return false, fmt.Errorf("%w: transaction %d is too old to look up", ErrUnknownOutcome, xid)
		case *status == "committed":
			return true, nil
		case *status == "aborted":
			return false, nil
		}
		// In progress: its backend has not finished with it yet.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}
