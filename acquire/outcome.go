package acquire

import (
	"errors"
	"fmt"
	"time"
)

// ErrLeaseLost is returned by every guarded write of a lease (Finish,
// CompleteTx, Release, Checkpoint, Extend) when the slot
// is no longer held by this owner with this fencing token: the lease expired
// and another worker took the slot over, it was ejected, or it was
// re-opened. Nothing was changed. Roll back whatever depends on the lease.
var ErrLeaseLost = errors.New("lease lost")

// ErrHeld is returned by Eject when the slot is held in locked mode by an
// open transaction, which only ending that transaction (or its backend) can
// release.
var ErrHeld = errors.New("slot is held in locked mode")

// ErrNotHeld is returned by Eject when the slot is not held and not
// acquirable: it is COMPLETE, SKIP or missing.
var ErrNotHeld = errors.New("slot is not held or acquirable")

// ErrTxManaged is returned when a handler calls Commit or Rollback on the
// transaction it was given: the transaction belongs to almanac, which ends
// it with the slot's outcome.
var ErrTxManaged = errors.New("the slot's transaction is managed by almanac: return from the handler instead of committing or rolling back")

// SkipError is returned by a handler (build it with Skip) to mark its slot
// SKIP: there is nothing to do for this interval. It is not a failure.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skip: " + e.Reason }

// Skip returns the error a handler returns to mark its slot SKIP with reason,
// e.g. "holiday: no trading". In locked mode the handler's writes are still
// committed with the SKIP, like with a completion.
func Skip(reason string) error { return &SkipError{Reason: reason} }

// SnoozeError is returned by a handler (build it with Snooze) to leave its
// slot AVAILABLE and look again later: "no result yet". It is not a
// failure: fail_count is unchanged.
type SnoozeError struct {
	After time.Duration
	Data  any
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("snooze for %s", e.After) }

// Snooze returns the error a handler returns to be called again for the
// same slot after d (measured on the database clock), the "check the remote
// system again in a minute" case of a long-running integration. In locked
// mode the handler's writes are committed with the snooze.
func Snooze(d time.Duration) *SnoozeError { return &SnoozeError{After: d} }

// WithData makes the snooze also save v (marshalled to JSON) as the slot's
// checkpoint, handed to the next attempt as Slot.Data.
func (e *SnoozeError) WithData(v any) *SnoozeError { e.Data = v; return e }

// Outcome is how a handler's run ended.
type Outcome string

const (
	Completed Outcome = "complete" // COMPLETE, committed with the handler's writes
	Skipped   Outcome = "skip"     // SKIP with the reason
	Snoozed   Outcome = "snooze"   // AVAILABLE again after the snooze
	Failed    Outcome = "fail"     // AVAILABLE again after the retry delay
	Parked    Outcome = "park"     // gave up: AVAILABLE with not_before = infinity
	Abandoned Outcome = "abandon"  // nothing recorded (shutdown, lost connection): acquirable again at once
)

// event names the outcome in the slots' history (slot_event.event).
func (o Outcome) event() string {
	switch o {
	case Completed:
		return "completed"
	case Skipped:
		return "skipped"
	case Snoozed:
		return "snoozed"
	case Failed:
		return "failed"
	case Parked:
		return "parked"
	}
	return ""
}

// Result reports one handler run.
type Result struct {
	Slot    Slot
	Outcome Outcome
	// Err is what the handler returned (the *SkipError or *SnoozeError for
	// Skipped and Snoozed, the failure for Failed and Parked), or the cause
	// for Abandoned.
	Err      error
	Delay    time.Duration // until the slot is acquirable again, for Snoozed and Failed
	Duration time.Duration // the handler's running time
	// Overrun is how long past Policy.MaxWork a locked-mode handler that
	// returned nil ran: its slot is completed all the same (its transaction,
	// and so its lock, lasted the whole time), and the overrun is written in
	// the slot's message.
	Overrun time.Duration

	saved    *string // checkpoint to store, as JSON
	timedOut bool    // the handler overran MaxWork
}
