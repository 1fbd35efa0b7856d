package acquire

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// controlsRead is how long a queue trusts what it last read of its
// series' controls that choose its claim statements (see controls). The
// statements never trust it: chosen for a series without a cap or without
// upstream series, they take no AVAILABLE slot of a series that has one,
// so a cap or a dependency added meanwhile only makes claims come back
// short until the next read, at most this long after the change.
const controlsRead = time.Second

// controls are the series' controls that choose a queue's claim
// statements: the others (pause, lag) are read and tested by every claim
// statement once, whatever they are, but these add work to the statement
// even when unset, so the statements without them are used for a series
// without them (see candidates).
type controls struct {
	// capped: the series has a cap (max_in_flight); its admissions lock
	// the series row and count what is held.
	capped bool
	// upstream: the series depends on upstream series (series_dependency);
	// each AVAILABLE slot is tested against them.
	upstream bool
}

// variant is the index of the claim statements for c in
// statements.claim and statements.selectLocked.
func (c controls) variant() int {
	v := 0
	if c.capped {
		v |= 1
	}
	if c.upstream {
		v |= 2
	}
	return v
}

// controlsState caches the series' controls, as read at when.
type controlsState struct {
	mu   sync.Mutex
	last controls
	when time.Time
}

// controls returns the series' controls, as read at most controlsRead ago,
// through db: the locked-mode transaction's own connection in locked mode,
// which may hold the only one it is allowed. A failed read keeps the last
// value (the statements are safe either way); in a transaction it fails
// the transaction, which the caller then reports.
func (q *Queue) controls(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) controls {
	q.ctl.mu.Lock()
	defer q.ctl.mu.Unlock()
	if now := time.Now(); now.Sub(q.ctl.when) >= controlsRead {
		var c controls
		if err := db.QueryRow(ctx, q.sql.readControls, q.name, q.interval).Scan(&c.capped, &c.upstream); err == nil {
			q.ctl.last, q.ctl.when = c, now
		}
	}
	return q.ctl.last
}

// selectCapped is selectLockedIn for a series with a cap, sql the capped
// variant of select_locked.sql the series' controls chose. In a
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
func (q *Queue) selectCapped(ctx context.Context, tx pgx.Tx, sql string, query func(sql string, extra ...any) ([]Slot, int64, error)) ([]Slot, int64, error) {
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
	slots, xid, err := query(sql, held)
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
