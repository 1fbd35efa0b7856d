package scheduler

import (
	"fmt"
	"strings"
	"time"

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
// with CRON_TZ=<zone> (the zone of the fields; default UTC). Errors wrap
// slot.ErrInvalid.
func parseSchedule(spec string) (s cron.Schedule, err error) {
	defer func() {
		// cron v3 panics on some malformed input (a TZ= prefix without a
		// space after it, found by fuzzing); that is bad input, not a crash.
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("%w: schedule %q: malformed (%v); expected a cron spec such as \"*/5 * * * *\"", slot.ErrInvalid, spec, p)
		}
	}()
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
	return s, nil
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
		next := t.schedule.Next(now)
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
