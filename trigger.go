package almanac

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/almanacdev/almanac/internal/schedule"
	"github.com/almanacdev/almanac/slot"
)

// trigger decides when a job materializes its due slots: on a cron
// schedule, or (without one) whenever the next slot becomes due.
type trigger struct {
	schedule cron.Schedule // nil: when the next slot becomes due
	grid     slot.Series
	lag      time.Duration
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
		next := schedule.Next(t.schedule, now)
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
