package acquire

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/seriesdb"
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
	c := q.controls(ctx, tx)
	if c.capped {
		return q.selectCapped(ctx, tx, q.sql.selectLocked[c.variant()], query)
	}
	return query(q.sql.selectLocked[c.variant()])
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
		s, err := r.locked(q, heldFence)
		if err != nil {
			return err
		}
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
	upstream           []byte // the upstream fragment's JSON, nil without dependencies
}

func (r *slotRow) dest() []any {
	return []any{&r.start, &r.end, &r.attempts, &r.failures, &r.data, &r.message, &r.tookOver, &r.fence, &r.generation, &r.upstream}
}

// locked is the Slot of a row locked for a locked-mode transaction of q,
// with the fence of the expired lease it took over, if any.
func (r *slotRow) locked(q *Queue, heldFence int64) (Slot, error) {
	s, err := r.slot(q)
	// Locked mode writes attempts at the end: this run is one more.
	s.Attempt, s.heldFence = r.attempts+1, heldFence
	return s, err
}

// slot returns the row as a Slot. It fails only when an upstream series'
// row is unusable (written badly by another tool).
func (r *slotRow) slot(q *Queue) (Slot, error) {
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
	if r.upstream != nil {
		var err error
		if s.Upstream, err = upstreamSlots(r.upstream); err != nil {
			return Slot{}, err
		}
	}
	return s, nil
}

// upstreamSlots decodes the upstream fragment's JSON (sql/fragments.sql):
// the upstream slots, each on its own series' grid.
func upstreamSlots(raw []byte) ([]Slot, error) {
	var ups []struct {
		N, I, Z string
		O       time.Time
		S       []struct {
			S, E time.Time
			G    int64
		}
	}
	if err := json.Unmarshal(raw, &ups); err != nil {
		return nil, fmt.Errorf("upstream slots: %w", err)
	}
	var out []Slot
	for _, u := range ups {
		grid, err := seriesdb.Parse(u.N, u.I, u.Z, u.O)
		if err != nil {
			return nil, fmt.Errorf("upstream slots: %w", err)
		}
		loc := grid.Location()
		for _, x := range u.S {
			s := Slot{Name: u.N, Generation: x.G, Slot: slot.Slot{Start: x.S.In(loc), End: x.E.In(loc), Interval: grid.Interval()}}
			if g, err := grid.Floor(x.S); err == nil && g.Start.Equal(x.S) {
				s.Slot.Index = g.Index
			}
			out = append(out, s)
		}
	}
	return out, nil
}
