package acquire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/almanacdev/almanac/internal/redact"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/safetext"
)

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

// faultDelay is how long a slot whose handler hit a database fault waits
// before it is tried again.
const faultDelay = time.Second

// classify maps a handler's return value to an outcome and a delay. A
// handler that failed because of a database fault (a lost connection, a
// restarting server, a serialization failure: see retry.Transient) did not
// fail at its work: the slot is snoozed for faultDelay, not counted as a
// failure, so a fault can neither park a slot nor make it back off for an
// hour.
func (q *Queue) classify(s Slot, err error) (Outcome, time.Duration, error) {
	var skip *SkipError
	var snooze *SnoozeError
	switch {
	case err == nil:
		return Completed, 0, nil
	case errors.As(err, &skip):
		return Skipped, 0, err
	case errors.As(err, &snooze):
		return Snoozed, max(snooze.After, 0), err
	case !errors.Is(err, errMaxWork) && retry.Transient(context.Background(), err):
		return Snoozed, faultDelay, err
	}
	failures := s.FailCount + 1
	if q.opts.MaxAttempts > 0 && failures >= q.opts.MaxAttempts {
		return Parked, 0, err
	}
	delay, retry := q.opts.Retry(failures, err)
	if !retry {
		return Parked, 0, err
	}
	return Failed, max(delay, 0), err
}

// maxMessage bounds the failure text stored on a slot, in bytes.
const maxMessage = 4096

// outcomeColumns returns the values a result writes: status, fail_count (-1
// keeps the current one), message, delay in microseconds (nil: none,
// negative: parked) and checkpoint data (nil: keep).
func outcomeColumns(r Result) (status string, failCount int, message *string, delay *int64, data *string, err error) {
	us := func(d time.Duration) *int64 { v := d.Microseconds(); return &v }
	text := func(s string) *string { s = boundText(s); return &s }
	switch r.Outcome {
	case Completed:
		if r.Overrun > 0 {
			return "COMPLETE", 0, text(fmt.Sprintf("completed %s after its MaxWork had passed", r.Overrun.Round(time.Millisecond))), nil, nil, nil
		}
		return "COMPLETE", 0, nil, nil, nil, nil
	case Skipped:
		var skip *SkipError
		errors.As(r.Err, &skip)
		reason := ""
		if skip != nil {
			reason = skip.Reason
		}
		return "SKIP", -1, text(reason), nil, nil, nil
	case Snoozed:
		var snooze *SnoozeError
		if !errors.As(r.Err, &snooze) && r.Err != nil {
			// A database fault: say so on the slot.
			return "AVAILABLE", -1, text("retrying after a database fault: " + r.Err.Error()), us(r.Delay), nil, nil
		}
		return "AVAILABLE", -1, nil, us(r.Delay), r.saved, nil
	case Failed:
		return "AVAILABLE", r.Slot.FailCount + 1, text(r.Err.Error()), us(r.Delay), nil, nil
	case Parked:
		parked := int64(-1)
		failures := "failures"
		if r.Slot.FailCount+1 == 1 {
			failures = "failure"
		}
		return "AVAILABLE", r.Slot.FailCount + 1, text("gave up after " + fmt.Sprint(r.Slot.FailCount+1) + " " + failures + ": " + r.Err.Error()), &parked, nil, nil
	}
	return "", 0, nil, nil, nil, fmt.Errorf("acquire: no columns for outcome %q", r.Outcome)
}

// boundText returns s as it can be stored as a slot's message: passwords
// redacted, valid UTF-8 without NUL or other control characters but
// newline and tab, at most maxMessage bytes. A handler's error text can be
// anything; the write that records it must not fail because of it.
func boundText(s string) string { return safetext.Head(redact.String(s), maxMessage) }

// snoozeData marshals the checkpoint a snooze carries, if any.
func snoozeData(err error) (*string, error) {
	var snooze *SnoozeError
	if !errors.As(err, &snooze) || snooze.Data == nil {
		return nil, nil
	}
	b, mErr := json.Marshal(snooze.Data)
	if mErr != nil {
		return nil, fmt.Errorf("acquire: snooze data: %w", mErr)
	}
	text := string(b)
	return &text, nil
}
