package coverage

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Held is a slot that an operation left alone because a worker holds it.
type Held struct {
	// Start and End are the slot's stored bounds, in the series' zone.
	Start, End time.Time
	// Status is the row's status as the operation read it.
	Status string
	// Locked is true when another transaction holds a row lock on the slot:
	// a worker in locked mode (the row stays AVAILABLE while it works), or a
	// worker or tool about to commit a change to it. When false the slot is
	// ACQUIRED under a lease, by Owner until LeaseUntil.
	Locked bool
	// Owner and LeaseUntil describe the lease of an ACQUIRED slot; they are
	// empty and zero otherwise. A LeaseUntil in the past means the holder
	// stopped heart-beating and the slot is about to be taken over.
	Owner      string
	LeaseUntil time.Time
}

// heldScan receives the held rows of a chunk, aggregated into arrays by
// heldColumns.
type heldScan struct {
	starts, ends []time.Time
	statuses     []string
	owners       []string
	leases       []pgtype.Timestamptz
}

func (h *heldScan) dest() []any {
	return []any{&h.starts, &h.ends, &h.statuses, &h.owners, &h.leases}
}

// appendTo appends the held slots to out, with times in loc.
func (h *heldScan) appendTo(out []Held, loc *time.Location) []Held {
	for i := range h.starts {
		hs := Held{
			Start: h.starts[i].In(loc), End: h.ends[i].In(loc),
			Status: h.statuses[i], Locked: h.statuses[i] != "ACQUIRED", Owner: h.owners[i],
		}
		if h.leases[i].Valid && h.leases[i].InfinityModifier == pgtype.Finite {
			hs.LeaseUntil = h.leases[i].Time.In(loc)
		}
		out = append(out, hs)
	}
	return out
}

// scanRow scans one row of fixed columns followed by the held columns.
func scanRow(row pgx.Row, h *heldScan, fixed ...any) error {
	return row.Scan(append(fixed, h.dest()...)...)
}
