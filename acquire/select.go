package acquire

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/slot"
)

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
	q.floor.advance(epoch, lo, slots, whole, short)
	q.afterSearch(slots, max, whole, short)
	return slots, xid, nil
}

// selectLockedIn locks up to max slots in tx: AVAILABLE slots in [lo, hi),
// and with takeovers expired leases of the whole range.
func (q *Queue) selectLockedIn(ctx context.Context, tx pgx.Tx, max int, lo, hi time.Time, takeovers bool) ([]Slot, int64, error) {
	from, to := q.expiredIn(takeovers)
	query := func(sql string, extra ...any) ([]Slot, int64, error) {
		return q.querySlots(ctx, tx, sql, max, from, to, lo, hi, extra...)
	}
	if q.capped(ctx, tx) {
		return q.selectCapped(ctx, tx, query)
	}
	return query(q.sql.selectLocked)
}

// querySlots runs sql, select_locked.sql or its capped variant (which
// takes extra, the count of permits held), in tx.
func (q *Queue) querySlots(ctx context.Context, tx pgx.Tx, sql string, max int, from, to, lo, hi time.Time, extra ...any) ([]Slot, int64, error) {
	args := append([]any{q.name, q.interval, max, from, to, q.opts.Lag.Microseconds(),
		q.opts.TakeoverGrace.Microseconds(), lo, hi}, extra...)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("select slots: %w", err)
	}
	var out []Slot
	var r slotRow
	var heldFence, xid int64
	_, err = pgx.ForEachRow(rows, append(r.dest(), &heldFence, &xid), func() error {
		s := r.slot(q)
		// Locked mode writes attempts at the end: this run is one more.
		s.Attempt, s.heldFence = r.attempts+1, heldFence
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
