package acquire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFrontierUnderASerializableRole: the frontier's draws and lowerings
// run in READ COMMITTED transactions of their own, whatever the role's
// default isolation. Under a serializable default, draws that met on the
// series' row failed with a serialization failure (40001) and left their
// queues to search from their own floors.
func TestFrontierUnderASerializableRole(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	role, pool := f.roleFixture(16)
	f.exec(fmt.Sprintf(`ALTER ROLE %s SET default_transaction_isolation = 'serializable'`, role))
	pool.Reset()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		q := f.queueOn(pool, Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if _, ok := q.draw(ctx, int64(i), 10); !ok {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "draws failed")
}

// TestCompleteTxUnderSerializable: ten workers complete their leases with
// CompleteTx in transactions of their role's default isolation,
// SERIALIZABLE, each writing its effect first. None fails with a
// serialization failure: the completion reads its row by its address and
// takes no predicate lock on the primary key's pages, into which the
// completions of the neighbouring slots write. Read by the key, 80-93 % of
// the transactions failed with 40001.
func TestCompleteTxUnderSerializable(t *testing.T) {
	const slots = 200
	f := newFixture(t, slots)
	ctx := context.Background()
	role, pool := f.roleFixture(24)
	f.exec(fmt.Sprintf(`ALTER ROLE %s SET default_transaction_isolation = 'serializable'`, role))
	pool.Reset()
	q := f.queueOn(pool, Options{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				leases, err := q.Claim(ctx, 1)
				if !assert.NoError(t, err) || len(leases) == 0 {
					return
				}
				l := leases[0]
				for {
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if err := writeEffect(ctx, tx, f.schema, l.Slot, "lease"); err != nil {
							return err
						}
						return l.CompleteTx(ctx, tx)
					})
					if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "40001" {
						failed.Add(1)
						continue
					}
					if !assert.NoError(t, err) {
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "transactions that failed with 40001")
	require.Equal(t, slots, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	require.Equal(t, slots, f.count(`SELECT count(DISTINCT slot_start) FROM {{schema}}.effect`))
}

// TestCompleteTxFindsAMovedRow: CompleteTx finds the row by its key when
// it has moved since the lease last wrote it (a checkpoint, a change by
// plain SQL, a heartbeat whose reply has not arrived), and its guard
// still refuses a lease lost.
func TestCompleteTxFindsAMovedRow(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	q := f.queue(Options{})
	leases, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	complete := func(l *Lease) error {
		return pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error { return l.CompleteTx(ctx, tx) })
	}

	require.NoError(t, leases[0].Checkpoint(ctx, "half"))
	require.NoError(t, complete(leases[0]))
	require.Equal(t, "COMPLETE", f.row(leases[0].Start).Status)

	f.exec(`UPDATE {{schema}}.slot SET data = '"by hand"' WHERE slot_start = $1`, leases[1].Start)
	require.NoError(t, complete(leases[1]))
	require.Equal(t, "COMPLETE", f.row(leases[1].Start).Status)

	f.exec(`UPDATE {{schema}}.slot SET fence = fence + 1000 WHERE slot_start = $1`, leases[2].Start)
	require.ErrorIs(t, complete(leases[2]), ErrLeaseLost)
	require.Equal(t, "ACQUIRED", f.row(leases[2].Start).Status)
}
