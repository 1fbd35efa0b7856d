package scheduler

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/robfig/cron/v3"

	"github.com/almanacdev/almanac/slot"
)

// trigger decides when a job materializes its due slots: on a cron
// schedule, or (without one) whenever the next slot becomes due.
type trigger struct {
	schedule cron.Schedule // nil: when the next slot becomes due
	grid     slot.Series
	lag      time.Duration
}

// parseSchedule reads a cron spec: five fields (minute hour day month
// weekday), a descriptor such as @hourly or @every 5m, optionally prefixed
// with CRON_TZ=<zone> (the zone of the fields; default UTC). A spec that
// never fires (February 30) is refused: it does not fire within lookAhead
// years. Errors wrap slot.ErrInvalid.
func parseSchedule(spec string) (s cron.Schedule, err error) {
	defer func() {
		// cron v3 panics on some malformed input (a TZ= prefix without a
		// space after it, found by fuzzing); that is bad input, not a crash.
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("%w: schedule %q: malformed (%v); expected a cron spec such as \"*/5 * * * *\"", slot.ErrInvalid, spec, p)
		}
	}()
	// A spec is one line: cron would echo a newline or another control
	// character into its error, which must stay one line.
	if i := strings.IndexFunc(spec, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }); i >= 0 {
		return nil, fmt.Errorf("%w: schedule %q: contains control character %U; expected a cron spec such as \"*/5 * * * *\"",
			slot.ErrInvalid, spec, []rune(spec[i:])[0])
	}
	s, err = cron.ParseStandard(spec)
	if every, ok := strings.CutPrefix(spec, "@every "); ok && err == nil {
		// cron rounds a zero or negative period up to a second; refuse it.
		if d, perr := time.ParseDuration(every); perr != nil || d < time.Second {
			err = fmt.Errorf("the period must be at least 1s")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v; expected a cron spec such as \"*/5 * * * *\", \"CRON_TZ=Europe/Berlin 0 2 * * *\" or \"@every 5m\"",
			slot.ErrInvalid, spec, err)
	}
	// A spec has no year field, so whether it ever fires does not depend on
	// when it is asked: the wall clock only picks which decade is searched.
	if nextFiring(s, time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: schedule %q never fires: no time matches it within %d years (is its day of the month missing from its months?); expected a spec such as \"0 0 28 2 *\"",
			slot.ErrInvalid, spec, lookAheadYears)
	}
	return s, nil
}

// lookAheadYears is how far ahead a schedule must fire. A spec that fires at
// all fires within any eight years (a leap day, across a century year that
// is not a leap year), so one that does not within ten never will.
const lookAheadYears = 10

// nextFiring returns the first firing of s after t within lookAheadYears,
// or the zero time. cron's own search gives up after about five years, so
// it is resumed from where it stopped.
func nextFiring(s cron.Schedule, t time.Time) time.Time {
	limit := t.AddDate(lookAheadYears, 0, 0)
	// Next(from) searches to the end of the fifth year after from's year,
	// so restarting five years later leaves no time unsearched.
	for from := t; from.Before(limit); from = from.AddDate(5, 0, 0) {
		if next := s.Next(from); !next.IsZero() {
			return next
		}
	}
	return time.Time{}
}

// CheckSchedule reports whether spec is a cron spec the scheduler accepts
// (see Job.Schedule). Errors wrap slot.ErrInvalid and name the spec.
func CheckSchedule(spec string) error {
	_, err := parseSchedule(spec)
	return err
}

// dueTo returns the end of the last due slot at now: a slot is due when
// slot_end + lag <= now, so every slot starting before dueTo is due.
func dueTo(grid slot.Series, lag time.Duration, now time.Time) (time.Time, error) {
	sl, err := grid.Floor(now.Add(-lag))
	if err != nil {
		return time.Time{}, err
	}
	return sl.Start, nil
}

// next returns when the trigger fires next after now.
func (t trigger) next(now time.Time) (time.Time, error) {
	if t.schedule != nil {
		next := nextFiring(t.schedule, now)
		if next.IsZero() {
			return time.Time{}, fmt.Errorf("schedule never fires again after %s", now.Format(time.RFC3339))
		}
		return next, nil
	}
	sl, err := t.grid.Floor(now.Add(-t.lag))
	if err != nil {
		return time.Time{}, err
	}
	return sl.End.Add(t.lag), nil
}
