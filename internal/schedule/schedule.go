// Package schedule reads the cron specs of jobs' triggers (Job.Schedule in
// the root package, `almanac run --schedule`): the one parser the scheduler
// and the CLI's input checks share, so a spec the CLI accepts is one the
// scheduler runs.
package schedule

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/robfig/cron/v3"

	"github.com/almanacdev/almanac/internal/input"
)

// lookAheadYears is how far ahead a schedule must fire. A spec that fires at
// all fires within any eight years (a leap day, across a century year that
// is not a leap year), so one that does not within ten never will.
const lookAheadYears = 10

// Parse reads a cron spec: five fields (minute hour day month weekday), a
// descriptor such as @hourly or @every 5m, optionally prefixed with
// CRON_TZ=<zone> (the zone of the fields; default UTC). A spec that never
// fires (February 30) is refused: it does not fire within lookAheadYears
// years. Errors wrap input.ErrInvalid, name the spec and stay on one line.
func Parse(spec string) (s cron.Schedule, err error) {
	defer func() {
		// cron v3 panics on some malformed input (a TZ= prefix without a
		// space after it, found by fuzzing); that is bad input, not a crash.
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("%w: schedule %q: malformed (%v); expected a cron spec such as \"*/5 * * * *\"", input.ErrInvalid, spec, p)
		}
	}()
	// A spec is one line: cron would echo a newline or another control
	// character into its error, which must stay one line.
	if i := strings.IndexFunc(spec, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }); i >= 0 {
		return nil, fmt.Errorf("%w: schedule %q: contains control character %U; expected a cron spec such as \"*/5 * * * *\"",
			input.ErrInvalid, spec, []rune(spec[i:])[0])
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
			input.ErrInvalid, spec, err)
	}
	// A spec has no year field, so whether it ever fires does not depend on
	// when it is asked: the wall clock only picks which decade is searched.
	if Next(s, time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: schedule %q never fires: no time matches it within %d years (is its day of the month missing from its months?); expected a spec such as \"0 0 28 2 *\"",
			input.ErrInvalid, spec, lookAheadYears)
	}
	return s, nil
}

// Next returns the first firing of s after t within lookAheadYears years,
// or the zero time. cron's own search gives up after about five years, so
// it is resumed from where it stopped.
func Next(s cron.Schedule, t time.Time) time.Time {
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
