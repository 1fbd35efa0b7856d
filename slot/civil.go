package slot

import "time"

// civil is a wall-clock reading without a zone: what a calendar on the wall
// and a clock would show. Calendar arithmetic happens here; only the result
// is turned into an instant, by resolve.
type civil struct {
	year                   int
	month                  time.Month
	day, hour, minute, sec int
	nsec                   int
}

func civilOf(t time.Time) civil {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return civil{y, mo, d, h, mi, s, t.Nanosecond()}
}

// supportedYear bounds all wall-clock arithmetic; instants are checked more
// precisely against minTime and maxTime afterwards.
func supportedYear(y int) bool { return y >= 1 && y <= 9999 }

// addMonths adds n months, clamping the day to the end of the resulting
// month: Jan 31 + 1 month is Feb 28 (or 29), never Mar 3 as time.AddDate
// would give. ok is false when the result leaves the supported years.
func (c civil) addMonths(n int64) (civil, bool) {
	if n > 12*10000 || n < -12*10000 {
		return c, false
	}
	total := int64(c.year)*12 + int64(c.month-1) + n
	y := floorDiv(total, 12)
	if !supportedYear(int(y)) {
		return c, false
	}
	c.year, c.month = int(y), time.Month(total-y*12+1)
	if last := daysIn(c.year, c.month); c.day > last {
		c.day = last
	}
	return c, true
}

// addDays adds n calendar days.
func (c civil) addDays(n int64) (civil, bool) {
	if n > 366*10000 || n < -366*10000 {
		return c, false
	}
	d := time.Date(c.year, c.month, c.day+int(n), 0, 0, 0, 0, time.UTC)
	if !supportedYear(d.Year()) {
		return c, false
	}
	c.year, c.month, c.day = d.Date()
	return c, true
}

func daysIn(year int, month time.Month) int {
	return time.Date(year, month+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// resolve turns a wall-clock reading into an instant in loc. Most readings
// name exactly one instant. For the two kinds that do not:
//
//   - A reading that falls into a gap (clocks jumped forward past it, such as
//     02:30 on a spring-forward night, or midnight in America/Santiago when
//     DST starts at 00:00) is read with the offset in force before the
//     jump, which moves it forward by the length of the gap: 02:30 becomes
//     03:30, 00:00 becomes 01:00.
//   - A reading that occurs twice (clocks turned back) is the earlier of the
//     two instants.
//
// These are the rules of RFC 5545 and Java's ZonedDateTime. (PostgreSQL
// agrees on gaps but picks the later instant of a repeated reading; almanac
// never asks PostgreSQL to resolve wall-clock readings.) They assume that no two offset changes happen
// within a day of each other, which holds for every zone except in a few
// instants of the 19th century.
func resolve(c civil, loc *time.Location) time.Time {
	wall := time.Date(c.year, c.month, c.day, c.hour, c.minute, c.sec, c.nsec, time.UTC)
	before := offsetAt(wall.Add(-24*time.Hour), loc)
	after := offsetAt(wall.Add(24*time.Hour), loc)
	var best time.Time
	for _, off := range [2]int{before, after} {
		t := wall.Add(-time.Duration(off) * time.Second)
		if offsetAt(t, loc) != off {
			continue
		}
		if best.IsZero() || t.Before(best) {
			best = t
		}
	}
	if best.IsZero() { // in a gap
		best = wall.Add(-time.Duration(before) * time.Second)
	}
	return best.In(loc)
}

func offsetAt(t time.Time, loc *time.Location) int {
	_, off := t.In(loc).Zone()
	return off
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
