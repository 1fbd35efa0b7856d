package input

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrDuration is the kind of a malformed duration. It matches ErrInvalid.
var ErrDuration = Kind("invalid duration")

// DurationSyntax says, for help texts and errors, which durations
// ParseDuration reads.
const DurationSyntax = "e.g. 90s, 10m, 1h30m, 2d, 1d12h, or ISO 8601 PT10M, P1D; a day is 24 hours"

// maxDays bounds a duration's days so that it fits a time.Duration (about
// 106,751 days).
const maxDays = 100_000

// ParseDuration reads a duration the way every almanac command does: Go's
// syntax (90s, 1h30m, 250ms), Go's syntax after a whole number of days
// (90d, 1d2h), or ISO 8601 (PT10M, P1D, P1W, P1DT12H, PT1.5S). A day is 24
// hours and a week 7 days, whatever the time zone's daylight saving time:
// durations are lengths of time, not calendar steps (a series' interval is
// the calendar step). Years and months, whose length depends on the date,
// are refused, and so are negative durations and durations beyond 100,000
// days. Errors wrap ErrDuration and name the text.
func ParseDuration(text string) (time.Duration, error) {
	d, ok := parseDuration(text)
	if !ok {
		if strings.HasPrefix(strings.TrimPrefix(text, "-"), "P") && strings.ContainsAny(strings.SplitN(text, "T", 2)[0], "YM") {
			return 0, fmt.Errorf("%w %q: years and months have no fixed length; use days (P30D, 30d)", ErrDuration, Abbreviate(text))
		}
		return 0, fmt.Errorf("%w %q: expected a length of time, %s", ErrDuration, Abbreviate(text), DurationSyntax)
	}
	return d, nil
}

func parseDuration(text string) (time.Duration, bool) {
	if rest, ok := strings.CutPrefix(text, "P"); ok {
		return parseISO(rest)
	}
	var days int64
	if head, tail, ok := strings.Cut(text, "d"); ok {
		n, ok := wholeNumber(head)
		if !ok || n > maxDays {
			return 0, false
		}
		days = n
		if tail == "" {
			return time.Duration(days) * 24 * time.Hour, true
		}
		text = tail
	}
	if text == "" || text[0] < '0' || text[0] > '9' && text[0] != '.' {
		return 0, false // no sign, no second "d"
	}
	d, err := time.ParseDuration(text)
	if err != nil || d < 0 {
		return 0, false
	}
	return addDays(d, days)
}

// parseISO reads what follows the P of an ISO 8601 duration: weeks and
// days, then after T hours, minutes and seconds (the last may have a
// fraction).
func parseISO(s string) (time.Duration, bool) {
	date, clock, hasT := strings.Cut(s, "T")
	if s == "" || hasT && clock == "" {
		return 0, false
	}
	var days int64
	for _, unit := range []struct {
		letter byte
		days   int64
	}{{'W', 7}, {'D', 1}} {
		if i := strings.IndexByte(date, unit.letter); i >= 0 {
			n, ok := wholeNumber(date[:i])
			if !ok || n > maxDays {
				return 0, false
			}
			days += n * unit.days
			date = date[i+1:]
		}
	}
	if date != "" || days > maxDays {
		return 0, false
	}
	var d time.Duration
	for _, unit := range []struct {
		letter byte
		size   time.Duration
	}{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}} {
		i := strings.IndexByte(clock, unit.letter)
		if i < 0 {
			continue
		}
		num := clock[:i]
		clock = clock[i+1:]
		if unit.letter == 'S' && strings.Contains(num, ".") {
			if strings.HasPrefix(num, ".") || strings.HasSuffix(num, ".") || strings.HasPrefix(num, "-") || strings.HasPrefix(num, "+") {
				return 0, false
			}
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || f > float64(maxDays*86400) {
				return 0, false
			}
			d += time.Duration(f * float64(time.Second))
			continue
		}
		n, ok := wholeNumber(num)
		if !ok || n > maxDays*int64(24*time.Hour/unit.size) {
			return 0, false
		}
		d += time.Duration(n) * unit.size
	}
	if clock != "" {
		return 0, false
	}
	return addDays(d, days)
}

// wholeNumber reads digits only: no sign, no spaces, no underscores.
func wholeNumber(s string) (int64, bool) {
	if s == "" || len(s) > 12 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// addDays adds days to d, refusing a sum beyond maxDays.
func addDays(d time.Duration, days int64) (time.Duration, bool) {
	const limit = maxDays * 24 * time.Hour
	if d > limit || time.Duration(days)*24*time.Hour > limit-d {
		return 0, false
	}
	return d + time.Duration(days)*24*time.Hour, true
}
