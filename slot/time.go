package slot

import (
	"fmt"
	"strings"
	"time"

	"github.com/almanacdev/almanac/internal/input"
)

// The supported instants. Every slot boundary lies in [minTime, maxTime]: a
// day inside the years 1 and 9999, so that a boundary written in any zone's
// local time still has a four-digit year, and PostgreSQL (which has no year
// 0) accepts it.
var (
	minTime = time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// MinTime returns the earliest supported instant, 0001-01-02T00:00Z.
func MinTime() time.Time { return minTime }

// MaxTime returns the latest supported instant, 9999-12-31T00:00Z.
func MaxTime() time.Time { return maxTime }

// timeLayout prints instants in RFC 3339 with the offset of their zone and
// with only as many fractional digits as needed, so the same instant in the
// same zone always prints the same text.
const timeLayout = "2006-01-02T15:04:05.999999Z07:00"

// FormatTime returns t in the text form used in slot texts: RFC 3339 with
// the offset of t's location, fractional seconds only when nonzero. RFC 3339
// offsets have no seconds, so an instant whose offset is not a whole number
// of minutes (local mean time, before about 1900) is written in UTC instead:
// the text must name the instant exactly.
func FormatTime(t time.Time) string {
	if _, off := t.Zone(); off%60 != 0 {
		t = t.UTC()
	}
	return t.Format(timeLayout)
}

// ParseTime parses an instant given on a command line or in configuration.
//
// With an offset, it is RFC 3339: 2026-03-01T00:00:00Z,
// 2026-03-29T00:00:00+01:00, with up to six fractional digits. Without one,
// it is a local date or date and time in loc — 2026-03-01 (midnight),
// 2026-03-01T06:00, 2026-03-01T06:00:30 — resolved by the rules in the
// package documentation (a reading in a DST gap moves forward, a repeated
// one is the earlier instant). A nil loc makes the offset required.
//
// Dates must be written in the extended form with hyphens: a date in the
// ISO 8601 basic form (20260301, 20260301T0600) is refused with the extended
// spelling in the message, never read as something else.
//
// The instant must lie in [minTime, maxTime] and be a whole number of
// microseconds. Errors wrap errTime and name the input; an error about a
// local reading names the zone it was read in.
func ParseTime(text string, loc *time.Location) (time.Time, error) {
	r, err := readTime(text)
	if err != nil {
		return time.Time{}, err
	}
	if r.hasOffset {
		return r.t, checkLimits(text, r.t, "")
	}
	if loc == nil {
		return time.Time{}, fmt.Errorf("%w %q: missing offset; %s", errTime, input.Abbreviate(text), expectedRFC3339)
	}
	t := resolve(civilOf(r.t), loc)
	return t, checkLimits(text, t, loc.String())
}

// CheckTime reports whether text is a time ParseTime reads in some zone:
// its syntax, its calendar (2026-02-29 does not exist) and its precision,
// and for an instant with an offset its limits. Whether a local reading
// lies within [minTime, maxTime] depends on the zone it is read in and is
// left to ParseTime. Errors wrap errTime and name the input.
//
// It lets a program refuse a malformed time before it knows the zone, for
// instance before it has loaded a series.
func CheckTime(text string) error {
	r, err := readTime(text)
	if err != nil {
		return err
	}
	if r.hasOffset {
		return checkLimits(text, r.t, "")
	}
	return nil
}

const expectedRFC3339 = "expected RFC 3339 such as 2026-03-01T00:00:00Z or 2026-03-01T00:00:00+01:00"

// reading is the syntax of a time text: an instant when it has an offset,
// else a wall-clock reading held in a UTC time.Time.
type reading struct {
	t         time.Time
	hasOffset bool
}

// readTime checks the syntax, calendar and precision of a time text.
func readTime(text string) (reading, error) {
	bad := func(why string) (reading, error) {
		return reading{}, fmt.Errorf("%w %q: %s", errTime, input.Abbreviate(text), why)
	}
	if extended, ok := basicToExtended(text); ok {
		return bad("ISO 8601 basic format, which almanac does not read; write it as " + extended)
	}
	if year, _, ok := strings.Cut(text, "-"); ok && len(year) > 4 && strings.Trim(year, "0123456789") == "" {
		return bad("year has more than four digits; expected a time between 0001-01-02 and 9999-12-31 UTC")
	}
	if len(text) < len("2006-01-02") || text[4] != '-' {
		return bad(expectedRFC3339 + ", or a local date such as 2026-03-01")
	}
	r := reading{hasOffset: strings.HasSuffix(text, "Z") || len(text) > 19 && strings.ContainsAny(text[19:], "+-")}
	if r.hasOffset {
		var err error
		r.t, err = time.Parse(time.RFC3339Nano, text)
		if err != nil || !strings.Contains(text, "T") {
			return bad(expectedRFC3339)
		}
	} else {
		var err error
		for _, layout := range []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05"} {
			if r.t, err = time.ParseInLocation(layout, text, time.UTC); err == nil {
				break
			}
		}
		if err != nil {
			return bad(expectedRFC3339 + ", or a local date or time such as 2026-03-01 or 2026-03-01T06:00")
		}
	}
	if r.t.Nanosecond()%1000 != 0 {
		return bad("finer than a microsecond; times are stored with microsecond precision")
	}
	return r, nil
}

// checkLimits refuses an instant outside [minTime, maxTime]; zone names the
// zone a local reading was resolved in ("" for a text with an offset).
func checkLimits(text string, t time.Time, zone string) error {
	if inLimits(t) {
		return nil
	}
	how := ""
	if zone != "" {
		how = " read in " + zone + " is " + FormatTime(t.UTC()) + ","
	}
	return fmt.Errorf("%w %q:%s outside the supported years; expected a time between 0001-01-02 and 9999-12-31 UTC", errTime, input.Abbreviate(text), how)
}

// basicToExtended recognizes a date, or date and time, in the ISO 8601
// basic format (20260301, 20260301T0600, 20260301T060030Z) and returns its
// extended spelling (2026-03-01, 2026-03-01T06:00, 2026-03-01T06:00:30Z).
func basicToExtended(text string) (string, bool) {
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	date, clock, hasClock := strings.Cut(text, "T")
	if len(date) != 8 || !digits(date) {
		return "", false
	}
	out := date[:4] + "-" + date[4:6] + "-" + date[6:]
	if !hasClock {
		return out, true
	}
	zone := ""
	if i := strings.IndexAny(clock, "Z+-"); i >= 0 {
		clock, zone = clock[:i], clock[i:]
	}
	if len(clock) != 4 && len(clock) != 6 || !digits(clock) {
		return "", false
	}
	out += "T" + clock[:2] + ":" + clock[2:4]
	if len(clock) == 6 {
		out += ":" + clock[4:]
	}
	return out + zone, true
}

// micros returns t as microseconds since the Unix epoch, rounded down.
// Every supported instant fits: ±3.2e17 is far from the int64 limits.
func micros(t time.Time) int64 {
	return t.Unix()*1e6 + int64(t.Nanosecond()/1000)
}

// fromMicros is the inverse of micros.
func fromMicros(us int64) time.Time {
	return time.Unix(floorDiv(us, 1e6), (us-floorDiv(us, 1e6)*1e6)*1000)
}

func inLimits(t time.Time) bool { return !t.Before(minTime) && !t.After(maxTime) }
