package almanac

import (
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/scheduler"
	"github.com/almanacdev/almanac/slot"
)

// The slot model: series, slots, intervals and the text forms a program
// reads from its users. Package slot has the details (time zones, DST,
// month ends); these names are here so that ordinary use needs only this
// package.

// Series is the grid of one series: a name, an ISO-8601 interval, a time
// zone and an origin. Obtain one from Client.Series or Client.LookupSeries;
// its ParseSlot reads a slot's text form.
type Series = slot.Series

// The working of a slot.

// Slot is what a handler sees of the slot it holds: its bounds and text
// form (Key and ComputationKey for idempotency keys), the fencing token, the
// generation, the attempt number, whether it took over from an expired
// holder, and the checkpoint of earlier attempts.
type Slot = acquire.Slot

// Lease is a slot held in lease mode: every write through it is guarded by
// owner and fencing token (ErrLeaseLost when the slot is no longer its
// holder's); CompleteTx completes it inside the caller's transaction.
type Lease = acquire.Lease

// Handler does the work of one slot in locked mode. Everything it writes
// through tx commits atomically with the slot's COMPLETE: return nil to
// complete, Skip(reason) to skip, Snooze(d) to look again later, or an error
// to have its writes rolled back and the failure retried with backoff.
type Handler = acquire.Handler

// LeaseHandler does the work of one slot in lease mode. Return nil to
// complete it (or complete it yourself with Lease.CompleteTx inside your
// own transaction, to commit your writes with the completion), Skip, Snooze
// or an error.
type LeaseHandler = scheduler.LeaseHandler

// Skip returns the error a handler returns to mark its slot SKIP.
func Skip(reason string) error { return acquire.Skip(reason) }

// Snooze returns the error a handler returns to be called again for the same
// slot after d, without counting a failure; WithData saves a checkpoint.
func Snooze(d time.Duration) *acquire.SnoozeError { return acquire.Snooze(d) }

// Outcome is how a slot's run ended; Summary counts them.
type Outcome = acquire.Outcome

// The outcomes of a slot's run.
const (
	Completed = acquire.Completed // COMPLETE, with the handler's writes
	Skipped   = acquire.Skipped   // SKIP
	Snoozed   = acquire.Snoozed   // AVAILABLE again after the snooze, not a failure
	Failed    = acquire.Failed    // AVAILABLE again after the retry delay
	Parked    = acquire.Parked    // gave up: stays visible until re-opened or retried
	Abandoned = acquire.Abandoned // nothing recorded (shutdown, lost connection); acquirable again
)

// Summary counts the outcomes of Drain.
type Summary = scheduler.Summary

// IncompleteError is what Drain's error (wrapping ErrIncomplete) holds: the
// slots left unfinished, by state.
type IncompleteError = scheduler.IncompleteError

// Mode is how a job holds its slots.
type Mode = scheduler.Mode

// The modes of a job.
const (
	// ModeLocked holds each slot in an open transaction, one slot per
	// transaction; the handler's writes commit with COMPLETE. The default,
	// for work of seconds to minutes.
	ModeLocked = scheduler.Locked
	// ModeLockedBatch locks up to Job.Batch slots per transaction: the
	// throughput path for short handlers.
	ModeLockedBatch = scheduler.LockedBatch
	// ModeLease claims each slot with a committed, heart-beaten lease: for
	// long work, work that must not hold a connection, and poolers.
	ModeLease = scheduler.Lease
)

// CatchUp is the policy for slots missed while no worker ran.
type CatchUp = scheduler.CatchUp

// The catch-up policies.
var (
	// CatchUpAll runs every missed slot (the default).
	CatchUpAll = scheduler.CatchUpAll
	// CatchUpNone runs none: missed slots are written as SKIP with the
	// reason "catch-up policy", so the hole stays visible.
	CatchUpNone = scheduler.CatchUpNone
)

// CatchUpLatest runs the latest n missed slots and skips the older ones.
func CatchUpLatest(n int) CatchUp { return scheduler.CatchUpLatest(n) }

// ParseCatchUp reads all, none or latest:N.
func ParseCatchUp(text string) (CatchUp, error) { return scheduler.ParseCatchUp(text) }

// RetryPolicy maps a failure (the number of failures so far, and the error)
// to a delay, or to giving up (the slot is parked).
type RetryPolicy = acquire.RetryPolicy

// Exponential waits base·2^(failures-1), capped at limit, spread by
// ±jitter (a fraction).
func Exponential(base, limit time.Duration, jitter float64) RetryPolicy {
	return acquire.Exponential(base, limit, jitter)
}

// DefaultRetry waits 1 s after the first failure, doubling up to 1 h, ±20 %.
var DefaultRetry = acquire.DefaultRetry

// Command runs a program once per slot: the handler of the sidecar
// (almanac run). Use its LeaseHandler in a Lease job, after Check.
type Command = scheduler.Command

// DefaultSkipExitCode is the exit status with which a Command marks its slot
// SKIP unless told otherwise.
const DefaultSkipExitCode = scheduler.DefaultSkipExitCode

// CheckSchedule reports whether spec is a cron spec a Job accepts: five
// fields, @hourly, @every 5m, an optional CRON_TZ= prefix, and a next
// firing within ten years. Errors wrap ErrInvalid.
func CheckSchedule(spec string) error { return scheduler.CheckSchedule(spec) }

// CheckEnv checks one Command.Env entry, NAME or NAME=value. Errors wrap
// ErrInvalid.
func CheckEnv(entry string) error { return scheduler.CheckEnv(entry) }

// DefaultReopenReason is the message of re-opened slots when
// ReopenOptions.Reason is empty.
const DefaultReopenReason = coverage.DefaultReopenReason
