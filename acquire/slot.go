package acquire

import (
	"encoding/json"
	"strconv"

	"github.com/almanacdev/almanac/slot"
)

// Slot statuses, as stored in the status column.
const (
	statusAvailable = "AVAILABLE"
	statusComplete  = "COMPLETE"
	statusSkip      = "SKIP"
)

// Slot is what a handler sees of the slot it holds.
type Slot struct {
	// Slot holds the bounds: Start, End (in the series' zone), Interval and
	// the grid Index. Its String is the slot's text form.
	slot.Slot
	// Name is the series name.
	Name string
	// Fence is the fencing token of this acquisition: it grows with every
	// acquisition of any slot and is never reused, even after a crash. Pass
	// it to external systems so they can refuse writes from a holder that
	// has since lost the slot (see the package documentation).
	Fence int64
	// Generation counts the slot's computations: 1 when it is created, one
	// more with every re-open (coverage's Reopen, `almanac reopen`, or a
	// plain SQL UPDATE that makes a COMPLETE or SKIP slot AVAILABLE). All
	// attempts of one computation share it. See ComputationKey.
	Generation int64
	// Attempt numbers this acquisition within the slot's generation: 1 for
	// the first after the slot was created or re-opened. In locked mode, an
	// attempt whose worker died is not counted (it wrote nothing).
	Attempt int
	// FailCount is the number of failures since the last success or re-open.
	FailCount int
	// TookOver reports that this acquisition took the slot from a lease
	// holder that expired or was ejected: that holder may have done part of
	// the work, so black-boxed integrations must treat the outcome as
	// uncertain. (A locked-mode holder that died wrote nothing and leaves no
	// trace, so its successor does not see TookOver.)
	TookOver bool
	// Data is the checkpoint saved by earlier attempts (Snooze with data,
	// Lease.Checkpoint), or nil. Resume from it instead of recomputing.
	Data json.RawMessage
	// Message is the last failure, skip or re-open reason recorded on the
	// slot, or "".
	Message string
	// Upstream lists, for a series that depends on others (see
	// almanac.SeriesOptions.After), the upstream slots overlapping this
	// one, by upstream series (name, then interval) and start, with the
	// generation each had when this slot was acquired: the computations
	// it covers. Their Key and ComputationKey are those the upstream's
	// own handlers saw, so idempotency keys can name them. Only Name, the
	// bounds (in the upstream's zone, Index on its grid) and Generation
	// are set. For a slot judged due they are all COMPLETE or SKIP; a
	// slot taken over from an expired lease lists them as they are now.
	// Compacted upstream slots (see coverage's Compact) have no row and
	// are not listed. Nil for a series without dependencies. It is not
	// bounded: a monthly slot over a minutely upstream lists some 44,640
	// slots (a few MiB), read with the claim; depend on a coarser series
	// (an hourly rollup) when that is too many.
	Upstream []Slot

	heldFence int64 // the slot's fence before this acquisition
}

// Key returns "<name> <slot text>", e.g. "sensor_report 2026-03-01T00:00:00Z/PT5M":
// a deterministic identifier of the slot, unique across series, for
// idempotency keys that mean "once per slot, ever". It is the same in every
// attempt and after every re-open, so a system that deduplicates on it
// ignores a recomputation asked for by a re-open: use ComputationKey for
// that. Combine it with Fence when each attempt needs its own identifier.
// The slot text has no spaces, so the last space separates the two parts
// whatever the name holds.
func (s Slot) Key() string { return s.Name + " " + s.Slot.String() }

// ComputationKey returns "<name> <slot text> <generation>", e.g.
// "sensor_report 2026-03-01T00:00:00Z/PT5M 2": the idempotency key of one
// computation of the slot, for "once per computation". It is the same in
// every attempt of a generation and changes with every re-open, so the
// recomputation a backfill asked for is not mistaken for a repeat.
func (s Slot) ComputationKey() string {
	return s.Key() + " " + strconv.FormatInt(s.Generation, 10)
}
