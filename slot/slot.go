package slot

import (
	"fmt"
	"strings"
	"time"

	"github.com/almanacdev/almanac/internal/input"
)

// Slot is one interval of a series: [Start, End). Start and End are in the
// series' time zone.
type Slot struct {
	// Index is the slot's position on the grid: slot 0 starts at the origin.
	Index    int64
	Start    time.Time
	End      time.Time
	Interval Interval
}

// String returns the slot's text form, an ISO-8601 time interval
// "<start>/<interval>" with the start in RFC 3339 and the offset of the
// series' zone, e.g. 2026-03-29T00:00:00+01:00/P1D. The same slot always
// prints the same text, so it serves as the task identifier in idempotency
// keys and logs.
func (sl Slot) String() string {
	return FormatTime(sl.Start) + "/" + sl.Interval.String()
}

// Contains reports whether t lies in [Start, End).
func (sl Slot) Contains(t time.Time) bool {
	return !t.Before(sl.Start) && t.Before(sl.End)
}

// Duration returns the slot's length in absolute time: 23 or 25 hours for a
// P1D slot on a DST day, always one hour for PT1H.
func (sl Slot) Duration() time.Duration { return sl.End.Sub(sl.Start) }

// ParseSlot parses a slot of the series from its text form,
// "<start>/<interval>" (2026-03-29T00:00:00+01:00/P1D) or "<start>/<end>"
// (2026-03-29T00:00:00+01:00/2026-03-30T00:00:00+02:00). The start must carry
// an offset (any offset naming the same instant is accepted; String always
// prints the zone's own), must be a boundary of the series' grid, and the
// interval must be the series' interval, or the end exactly one slot after
// the start. Errors wrap errSlot and name the text.
func (s Series) ParseSlot(text string) (Slot, error) {
	bad := func(why string, args ...any) (Slot, error) {
		return Slot{}, fmt.Errorf("%w %q: %s", errSlot, input.Abbreviate(text), fmt.Sprintf(why, args...))
	}
	startText, rest, ok := strings.Cut(text, "/")
	if !ok || strings.Contains(rest, "/") {
		return bad("expected <start>/<interval> such as 2026-03-01T00:00:00Z/%s", s.interval)
	}
	start, err := ParseTime(startText, nil)
	if err != nil {
		return bad("start: %v", unwrapInput(err))
	}
	sl, err := s.Floor(start)
	if err != nil {
		return bad("%v", unwrapInput(err))
	}
	if !sl.Start.Equal(start) {
		return bad("%s is not a slot boundary of %s; the slot containing it starts at %s", startText, s.name, FormatTime(sl.Start))
	}
	if strings.HasPrefix(rest, "P") {
		iv, err := ParseInterval(rest)
		if err != nil {
			return bad("%v", unwrapInput(err))
		}
		if iv != s.interval {
			return bad("interval %s is not the series interval %s", iv, s.interval)
		}
		return sl, nil
	}
	end, err := ParseTime(rest, nil)
	if err != nil {
		return bad("end: %v", unwrapInput(err))
	}
	if !end.Equal(sl.End) {
		return bad("end %s is not one %s slot after the start; expected %s", rest, s.interval, FormatTime(sl.End))
	}
	return sl, nil
}

// unwrapInput drops the leading kind of a nested input error so that a
// slot error reads as one sentence.
func unwrapInput(err error) string {
	msg := err.Error()
	for _, kind := range []error{errTime, errInterval, errRange} {
		msg = strings.TrimPrefix(msg, kind.Error()+" ")
		msg = strings.TrimPrefix(msg, kind.Error()+": ")
	}
	return msg
}
