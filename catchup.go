package almanac

import (
	"strconv"
	"time"

	"github.com/almanacdev/almanac/slot"
)

// CatchUp is what a job does with slots that became due while no instance
// ran (downtime, or a series created with a start date in the past):
//
//   - all (the default): run every one of them;
//   - latest:N: run the N most recently due slots; older missing ones are
//     written as SKIP with the message "catch-up policy";
//   - none: run nothing that was missed: missing slots that became due more
//     than the grace period ago (a minute, or one interval if longer, so a
//     healthy instance that is a moment late is not overruled) are written
//     as SKIP with the message "catch-up policy".
//
// Skipped slots stay visible in status and gap reports and can be
// re-opened later. The policy only ever concerns missing slots: slots that
// exist (a backlog of AVAILABLE ones, say) are never skipped by it.
type CatchUp struct {
	kind   catchUpKind
	latest int
}

type catchUpKind int

const (
	catchUpAll catchUpKind = iota // the zero value
	catchUpNone
	catchUpLatest
)

// The catch-up policies. The zero CatchUp is CatchUpAll.
var (
	// CatchUpAll runs every missed slot (the default).
	CatchUpAll = CatchUp{kind: catchUpAll}
	// CatchUpNone runs none: missed slots are written as SKIP with the
	// message "catch-up policy", so the hole stays visible.
	CatchUpNone = CatchUp{kind: catchUpNone}
)

// CatchUpLatest returns the policy that runs the n most recently due
// missing slots; n below 1 counts as 1.
func CatchUpLatest(n int) CatchUp { return CatchUp{kind: catchUpLatest, latest: max(n, 1)} }

// String returns "all", "none" or "latest:N", the form `almanac run
// --catch-up` reads.
func (c CatchUp) String() string {
	switch c.kind {
	case catchUpNone:
		return "none"
	case catchUpLatest:
		return "latest:" + strconv.Itoa(c.latest)
	default:
		return "all"
	}
}

// catchUpReason is the message of slots skipped by a catch-up policy.
const catchUpReason = "catch-up policy"

// catchUpPlan splits the due range [from, dueTo) of a series: slots before
// skipBefore that are missing are skipped, the rest materialized.
// skipBefore == from means nothing is skipped.
func catchUpPlan(c CatchUp, grid slot.Series, from, dueTo time.Time) (skipBefore time.Time, err error) {
	switch {
	case c.kind == catchUpAll || !from.Before(dueTo):
		return from, nil
	case c.kind == catchUpNone:
		grace := max(time.Minute, grid.Interval().Clock()+time.Duration(grid.Interval().Days())*24*time.Hour)
		if grid.Interval().Months() > 0 {
			grace = max(grace, 31*24*time.Hour)
		}
		// Slots whose due time (end + lag) is within the grace period are
		// still run. dueTo is at most now - lag, so a slot ending at or
		// before dueTo - grace became due at least grace ago.
		limit := dueTo.Add(-grace)
		if !limit.After(from) {
			return from, nil
		}
		sl, err := grid.Floor(limit)
		if err != nil {
			return from, err
		}
		return sl.Start, nil
	default:
		last, err := grid.Floor(dueTo.Add(-time.Microsecond))
		if err != nil {
			return from, err
		}
		first, err := grid.Slot(last.Index - int64(c.latest) + 1)
		if err != nil {
			// Before the supported years, or an empty slot: keep everything.
			return from, nil //nolint:nilerr // the policy keeps more, never less
		}
		if first.Start.Before(from) {
			return from, nil
		}
		return first.Start, nil
	}
}
