package acquire

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// capRead is how long a queue trusts what it last read of its series' cap
// (series.max_in_flight). The claim statements never trust it: without a
// cap they take no AVAILABLE slot of a series that has one, so a cap set
// meanwhile only makes claims come back short until the next read.
const capRead = time.Second

// capState caches whether the queue's series has a cap.
type capState struct {
	mu     sync.Mutex
	capped bool
	at     time.Time
}

// capped reports whether the series has a cap, as read at most capRead
// ago, through db: the locked-mode transaction's own connection in locked
// mode, which may hold the only one it is allowed. A failed read keeps the
// last value (the statements are safe either way); in a transaction it
// fails the transaction, which the caller then reports.
func (q *Queue) capped(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) bool {
	q.cap.mu.Lock()
	defer q.cap.mu.Unlock()
	if now := time.Now(); now.Sub(q.cap.at) >= capRead {
		var capped bool
		err := db.QueryRow(ctx, q.sql.readCap, q.name, q.interval).Scan(&capped)
		if err == nil {
			q.cap.capped, q.cap.at = capped, now
		}
	}
	return q.cap.capped
}

// selectCapped is selectLockedIn for a series with a cap. In a
// transaction of its own, on a second connection (the pool's reserve
// provides it: it waits only for other admissions, which are short), it
// locks the series row, so that admissions happen one at a time; while it
// holds it, tx (the locked-mode transaction) counts the permits other
// locked-mode transactions hold, selects what the cap admits, and takes a
// permit for each AVAILABLE slot it got (expired leases it took over are
// counted as ACQUIRED already). Permits are rows of series_permit locked
// by tx: they end with tx, whatever ends it, so a crashed worker's slots
// leave the count at once, as its slots' row locks do; and no role without
// a privilege on almanac's tables can take one.
func (q *Queue) selectCapped(ctx context.Context, tx pgx.Tx, query func(sql string, extra ...any) ([]Slot, int64, error)) ([]Slot, int64, error) {
	gate, err := q.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	defer gate.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := gate.Exec(ctx, q.sql.lockSeries, q.name, q.interval); err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	var limit, held int64
	if err := tx.QueryRow(ctx, q.sql.readCapValue, q.name, q.interval).Scan(&limit); err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	// The permits tx can lock are free; the savepoint lets go of them.
	if _, err := tx.Exec(ctx, "SAVEPOINT almanac_permits"); err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	if err := tx.QueryRow(ctx, q.sql.countPermits, q.name, q.interval, limit).Scan(&held); err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT almanac_permits"); err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	slots, xid, err := query(q.sql.selectLockedCapped, held)
	if err != nil {
		return nil, 0, err
	}
	fresh := 0
	for _, s := range slots {
		if !s.TookOver {
			fresh++
		}
	}
	if fresh > 0 {
		if _, err := tx.Exec(ctx, q.sql.takePermits, q.name, q.interval, fresh, limit); err != nil {
			return nil, 0, fmt.Errorf("admission: %w", err)
		}
	}
	if err := gate.Commit(ctx); err != nil {
		return nil, 0, fmt.Errorf("admission: %w", err)
	}
	return slots, xid, nil
}
