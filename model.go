package almanac

import (
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/scheduler"
	"github.com/almanacdev/almanac/slot"
)

// The slot model and the working of a slot. Their types are defined in the
// layers that need them too (slot for the calendar, acquire for custom
// claim loops) and named here, with the same names, so that ordinary use
// needs only this package; each comment says where the fields and methods
// are documented.

// Series is the grid of one series: a name, an ISO-8601 interval, a time
// zone and an origin. Obtain one from Client.Series or Client.LookupSeries.
// Its methods (Slot, Floor, Next, Slots, ParseSlot, Count, ...) are
// documented at slot.Series, with the calendar rules (time zones, DST,
// month ends) in package slot.
type Series = slot.Series

// Slot is what a handler sees of the slot it holds: its bounds and text
// form, Key and ComputationKey for idempotency keys, the fencing token
// (Fence), the generation, the attempt number, whether it took over from an
// expired holder (TookOver), the checkpoint of earlier attempts (Data),
// and for a series with upstream series the upstream slots it covers with
// their generations (Upstream). Its fields are documented at acquire.Slot.
type Slot = acquire.Slot

// Lease is a slot held in lease mode: every write through it is guarded by
// owner and fencing token (ErrLeaseLost when the slot is no longer its
// holder's). A LeaseHandler runs its work under Context; CompleteTx
// completes the slot inside the caller's transaction, Checkpoint saves
// progress for the next holder. Its methods are documented at
// acquire.Lease.
type Lease = acquire.Lease

// Handler does the work of one slot in locked mode. Everything it writes
// through tx commits atomically with the slot's outcome: return nil to
// complete, Skip(reason) to skip, Snooze(d) to look again later, or an error
// to have its writes rolled back and the failure retried with backoff
// (Policy.Retry). The whole contract, misbehaviour included, is documented
// at acquire.Handler.
type Handler = acquire.Handler

// LeaseHandler does the work of one slot in lease mode. It returns what a
// Handler returns: nil to complete the slot (or it completes the slot
// itself with Lease.CompleteTx inside its own transaction, to commit its
// writes with the completion; if that transaction did not commit, the
// slot's failure says so), Skip, Snooze or an error. Its context is
// cancelled when the lease is lost or the client stops; the lease is then
// released with its checkpoint.
type LeaseHandler = acquire.LeaseHandler

// Skip returns the error a handler returns to mark its slot SKIP with
// reason ("holiday: no trading"): nothing to do for this interval, not a
// failure. In locked mode the handler's writes commit with the SKIP.
func Skip(reason string) error { return acquire.Skip(reason) }

// Snooze returns the error a handler returns to be called again for the
// same slot after d (database clock), without counting a failure: "no
// result yet, look again in a minute". WithData saves a checkpoint, handed
// to the next attempt as Slot.Data. In locked mode the handler's writes
// commit with the snooze.
func Snooze(d time.Duration) *SnoozeError { return acquire.Snooze(d) }

// SnoozeError is the error Snooze returns: the delay (After) and the
// checkpoint to save (Data, set by WithData), documented at
// acquire.SnoozeError.
type SnoozeError = acquire.SnoozeError

// RetryPolicy maps a failure (the number of failures so far, 1 after the
// first, and the error) to a delay before the slot may be acquired again,
// or to giving up: the slot is parked, AVAILABLE with not_before
// 'infinity', visible in Status and Gaps until it is re-opened or retried.
type RetryPolicy = acquire.RetryPolicy

// Exponential returns a policy that waits base·2^(failures-1), capped at
// limit, spread by ±jitter (a fraction, 0.2 for ±20 %) so that slots
// failing together do not retry in lockstep. It always retries; use
// Policy.MaxAttempts to park slots.
func Exponential(base, limit time.Duration, jitter float64) RetryPolicy {
	return acquire.Exponential(base, limit, jitter)
}

// Command runs a program once per slot: the handler of the sidecar
// (`almanac run`), for a lease-mode job. Call Check before registering the
// job, so that a program that cannot start is refused before a slot is
// claimed; use its LeaseHandler as Job.LeaseHandler. Its fields, the
// program's environment and what dies when are documented at
// scheduler.Command.
type Command = scheduler.Command
