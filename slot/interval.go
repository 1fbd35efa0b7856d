package slot

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/almanacdev/almanac/internal/input"

	"github.com/sosodev/duration"
)

// Interval is the length of the slots of a series: an ISO-8601 duration made
// of a calendar part (years, months, weeks, days), added in the series' time
// zone, and a clock part (hours, minutes, seconds), added as absolute time.
//
// Two intervals are the same interval exactly when they are == and have the
// same String. Equal spellings are folded together:
//
//   - P12M is P1Y: twelve months always end on the same date as one year.
//   - P7D is P1W: a week is seven calendar days, so the two step through
//     the calendar identically. A days-only interval that is a whole number
//     of weeks is written in weeks (P14D prints as P2W) and, like P1W, its
//     default origin is a Monday (see defaultOrigin).
//   - PT60M is PT1H and PT90S is PT1M30S: clock parts are one duration.
//
// Calendar and clock parts are never folded into each other: P1D is not
// PT24H (a P1D slot is 23 or 25 hours long on DST days, PT24H always 24), and
// P1M is not P30D.
//
// The zero Interval is invalid; obtain one from ParseInterval.
type Interval struct {
	months int64 // years×12 + months
	days   int64 // weeks×7 + days
	micros int64 // clock part in microseconds (PostgreSQL's resolution)
}

// Limits on intervals. The supported years (minTime to maxTime, about 9,999
// years) must hold several slots of every series, so an interval is at most
// maxInterval long, and its clock part at most the longest time.Duration,
// about 292 years, so that Interval.Clock never overflows.
const (
	// micros in a mean Gregorian year (365.2425 days) and a mean month
	// (a twelfth of it): the nominal length of calendar parts.
	yearMicros  = 31_556_952e6
	monthMicros = yearMicros / 12
	dayMicros   = 86_400e6
	// maxNominal is the length of maxInterval, P1000Y.
	maxNominal = 1000 * yearMicros
	maxMonths  = maxNominal / monthMicros
	maxDays    = maxNominal / dayMicros
	maxMicros  = math.MaxInt64 / 1000
)

// maxInterval is the longest interval, P1000Y. An interval's length is
// compared in mean Gregorian years of 365.2425 days (a month is a twelfth of
// one), so P12000M and P365242D are accepted and P1000Y1D is not.
const maxInterval = "P1000Y"

// ParseInterval parses an ISO-8601 duration such as PT5M, PT1H, P1D, P1W,
// P1M, P3M, P1Y or P1DT12H and returns it in canonical form.
//
// Accepted: the designators Y, M, W, D, T, H, M, S in that order, each at most
// once, with whole numbers of ASCII digits; the clock part's last (smallest)
// component may have a decimal fraction written with '.' (PT1.5H is PT1H30M),
// down to whole microseconds. Rejected, with an error that wraps errInterval
// and names the input: anything else, zero, negative durations, and
// fractional years, months, weeks or days (their length depends on the date).
func ParseInterval(text string) (Interval, error) {
	bad := func(why string, args ...any) (Interval, error) {
		return Interval{}, fmt.Errorf("%w %q: %s", errInterval, input.Abbreviate(text), fmt.Sprintf(why, args...))
	}
	if strings.HasPrefix(text, "-") {
		return bad("negative; expected a positive duration such as PT5M or P1D")
	}
	if err := checkDurationSyntax(text); err != "" {
		return bad("%s; expected an ISO-8601 duration such as PT5M, PT1H, P1D, P1W or P1M", err)
	}
	d, err := duration.Parse(text)
	if err != nil {
		return bad("not an ISO-8601 duration (%v); expected e.g. PT5M, PT1H, P1D, P1W or P1M", err)
	}
	for _, part := range []struct {
		v    float64
		unit string
	}{{d.Years, "years"}, {d.Months, "months"}, {d.Weeks, "weeks"}, {d.Days, "days"}} {
		if part.v != math.Trunc(part.v) {
			return bad("fractional %s (%g); calendar parts must be whole numbers because their length depends on the date", part.unit, part.v)
		}
	}
	tooLong := "too large: longer than " + maxInterval + ", the longest interval (years of 365.2425 days), so that the supported years 0001 to 9999 hold several slots"
	if d.Years > maxMonths/12 || d.Months > maxMonths || d.Weeks > maxDays/7 || d.Days > maxDays {
		return bad("%s", tooLong)
	}
	var iv Interval
	iv.months = int64(d.Years)*12 + int64(d.Months)
	iv.days = int64(d.Weeks)*7 + int64(d.Days)
	micros, why := clockMicros(d.Hours, d.Minutes, d.Seconds)
	if why != "" {
		return bad("%s", why)
	}
	iv.micros = micros
	// Each part is below the limit, so the sum cannot overflow.
	if iv.months*monthMicros+iv.days*dayMicros+iv.micros > maxNominal {
		return bad("%s", tooLong)
	}
	if iv.months == 0 && iv.days == 0 && iv.micros == 0 {
		return bad("zero length; expected a positive duration such as PT5M or P1D")
	}
	return iv, nil
}

// clockMicros converts the clock components to microseconds exactly: whole
// components are multiplied as integers, and only a fraction (on the last
// component) goes through floating point, where the binary rounding of a
// decimal fraction is tolerated but a part of a microsecond is not.
func clockMicros(h, m, sec float64) (int64, string) {
	var total int64
	for _, part := range []struct {
		v    float64
		unit int64
	}{{h, 3600e6}, {m, 60e6}, {sec, 1e6}} {
		if part.v == 0 {
			continue
		}
		if part.v >= float64(maxMicros/part.unit+1) {
			return 0, "clock part too large; at most P" + formatClock(maxMicros)
		}
		var micros int64
		if whole := math.Trunc(part.v); whole == part.v {
			micros = int64(whole) * part.unit
		} else {
			f := part.v * float64(part.unit)
			r := math.Round(f)
			if math.Abs(f-r) > 1e-6 {
				return 0, "finer than a microsecond; slot boundaries are stored with microsecond precision"
			}
			micros = int64(r)
		}
		if total > maxMicros-micros {
			return 0, "clock part too large; at most P" + formatClock(maxMicros)
		}
		total += micros
	}
	return total, ""
}

// checkDurationSyntax enforces the strict ISO-8601 form that the duration
// library is lenient about: repeated or out-of-order designators, an empty
// "P" or "T", non-ASCII digits, and fractions anywhere but the last
// component. It returns a description of the first problem, or "".
func checkDurationSyntax(s string) string {
	if !strings.HasPrefix(s, "P") {
		return "does not start with P"
	}
	designators := "YMWD" // before T; after it "HMS", where M means minutes
	next := 0             // designators[next:] may still come
	inClock := false
	components, clockComponents := 0, 0
	for i := 1; i < len(s); {
		if s[i] == 'T' {
			if inClock {
				return "T appears twice"
			}
			inClock, designators, next = true, "HMS", 0
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i {
			return fmt.Sprintf("expected a number at %q", input.Abbreviate(s[i:]))
		}
		fractional := false
		if j < len(s) && (s[j] == '.' || s[j] == ',') {
			if s[j] == ',' {
				return "decimal comma; write the fraction with '.'"
			}
			k := j + 1
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				k++
			}
			if k == j+1 {
				return "a decimal point without digits after it"
			}
			j, fractional = k, true
		}
		if j == len(s) {
			return fmt.Sprintf("number %s has no designator", input.Abbreviate(s[i:]))
		}
		at := strings.IndexByte(designators[next:], s[j])
		if at < 0 {
			if strings.IndexByte("YMWDHS", s[j]) < 0 {
				return fmt.Sprintf("unexpected character %q", s[j])
			}
			return fmt.Sprintf("designator %c is repeated, out of order or on the wrong side of T", s[j])
		}
		if fractional && j+1 != len(s) {
			return "only the last component may have a fraction"
		}
		next += at + 1
		components++
		if inClock {
			clockComponents++
		}
		i = j + 1
	}
	if components == 0 {
		return "no components"
	}
	if inClock && clockComponents == 0 {
		return "T is not followed by hours, minutes or seconds"
	}
	return ""
}

// String returns the canonical ISO-8601 text of the interval, its identity
// in the database: years and months (twelve months carry into a year), then
// weeks — only when the interval is a whole number of weeks and nothing
// else — or days, then hours, minutes and seconds with 60 seconds carried
// into a minute and 60 minutes into an hour (PT60M prints as PT1H, PT90S as
// PT1M30S), seconds with at most six fractional digits. Zero parts are left
// out, so the common intervals print in their shortest form.
func (iv Interval) String() string {
	if iv.IsZero() {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteByte('P')
	if y := iv.months / 12; y != 0 {
		b.WriteString(strconv.FormatInt(y, 10) + "Y")
	}
	if m := iv.months % 12; m != 0 {
		b.WriteString(strconv.FormatInt(m, 10) + "M")
	}
	if iv.days != 0 {
		if iv.days%7 == 0 && iv.months == 0 && iv.micros == 0 {
			b.WriteString(strconv.FormatInt(iv.days/7, 10) + "W")
		} else {
			b.WriteString(strconv.FormatInt(iv.days, 10) + "D")
		}
	}
	if iv.micros != 0 {
		b.WriteString(formatClock(iv.micros))
	}
	return b.String()
}

// formatClock writes a positive number of microseconds as THMS.
func formatClock(micros int64) string {
	h := micros / 3600e6
	m := micros / 60e6 % 60
	s := micros % 60e6
	out := "T"
	if h != 0 {
		out += strconv.FormatInt(h, 10) + "H"
	}
	if m != 0 {
		out += strconv.FormatInt(m, 10) + "M"
	}
	if s != 0 {
		sec := strconv.FormatInt(s/1e6, 10)
		if frac := s % 1e6; frac != 0 {
			sec += strings.TrimRight(fmt.Sprintf(".%06d", frac), "0")
		}
		out += sec + "S"
	}
	return out
}

// IsZero reports whether iv is the zero Interval, which is not valid.
func (iv Interval) IsZero() bool { return iv == Interval{} }

// Months returns the calendar months of the interval (years count as 12).
func (iv Interval) Months() int64 { return iv.months }

// Days returns the calendar days of the interval (weeks count as 7).
func (iv Interval) Days() int64 { return iv.days }

// Clock returns the clock part: hours, minutes and seconds as a duration.
func (iv Interval) Clock() time.Duration { return time.Duration(iv.micros) * time.Microsecond }

// Fixed reports whether every slot of the interval has the same length in
// absolute time: true when it has no calendar part (PT5M, PT1H), false for
// P1D, P1W, P1M and mixes such as P1DT12H.
func (iv Interval) Fixed() bool { return iv.months == 0 && iv.days == 0 }

// weeksOnly reports whether the interval is a whole number of weeks.
func (iv Interval) weeksOnly() bool { return iv.months == 0 && iv.micros == 0 && iv.days%7 == 0 }

// MarshalText implements encoding.TextMarshaler with the canonical form.
func (iv Interval) MarshalText() ([]byte, error) {
	if iv.IsZero() {
		return nil, fmt.Errorf("%w: zero interval", errInterval)
	}
	return []byte(iv.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseInterval.
func (iv *Interval) UnmarshalText(text []byte) error {
	v, err := ParseInterval(string(text))
	if err != nil {
		return err
	}
	*iv = v
	return nil
}
