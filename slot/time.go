package slot

import (
	"fmt"
	"strings"
	"time"
)

// The supported instants. Every slot boundary lies in [MinTime, MaxTime]: a
// day inside the years 1 and 9999, so that a boundary written in any zone's
// local time still has a four-digit year, and PostgreSQL (which has no year
// 0) accepts it.
var (
	MinTime = time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

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
// The instant must lie in [MinTime, MaxTime] and be a whole number of
// microseconds. Errors wrap ErrTime and name the input.
func ParseTime(text string, loc *time.Location) (time.Time, error) {
	bad := func(why string) (time.Time, error) {
		return time.Time{}, fmt.Errorf("%w %q: %s", ErrTime, abbreviate(text), why)
	}
	const expected = "expected RFC 3339 such as 2026-03-01T00:00:00Z or 2026-03-01T00:00:00+01:00"
	if len(text) >= 5 && strings.Trim(text[:5], "0123456789") == "" {
		return bad("year has more than four digits; expected a time between 0001-01-02 and 9999-12-31 UTC")
	}
	if len(text) < len("2006-01-02") || text[4] != '-' {
		return bad(expected + ", or a local date such as 2026-03-01")
	}
	hasOffset := strings.HasSuffix(text, "Z") || len(text) > 19 && strings.ContainsAny(text[19:], "+-")
	var t time.Time
	if hasOffset {
		var err error
		t, err = time.Parse(time.RFC3339Nano, text)
		if err != nil || !strings.Contains(text, "T") {
			return bad(expected)
		}
	} else {
		if loc == nil {
			return bad("missing offset; " + expected)
		}
		layouts := []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05"}
		var err error
		for _, layout := range layouts {
			if t, err = time.ParseInLocation(layout, text, time.UTC); err == nil {
				break
			}
		}
		if err != nil {
			return bad(expected + ", or a local date or time such as 2026-03-01 or 2026-03-01T06:00 (read in " + loc.String() + ")")
		}
		t = resolve(civilOf(t), loc)
	}
	if t.Nanosecond()%1000 != 0 {
		return bad("finer than a microsecond; times are stored with microsecond precision")
	}
	if t.Before(MinTime) || t.After(MaxTime) {
		return bad("outside the supported years; expected a time between 0001-01-02 and 9999-12-31 UTC")
	}
	return t, nil
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

func inLimits(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }
