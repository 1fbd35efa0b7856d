// Package slot is almanac's calendar model: ISO-8601 intervals, the grid of
// slots of a series in a time zone, and the text forms of slots and times.
// It is pure Go and never touches the database; every boundary almanac
// stores is computed here, so PostgreSQL never does calendar arithmetic
// (its interval type equates P1M with P30D and P1D with PT24H).
//
// # The grid
//
// A series has an interval, a time zone and an origin (defaultOrigin:
// 2000-01-01T00:00 local, or Monday 2000-01-03 for whole weeks). Slot n
// starts at origin + n·interval and ends where slot n+1 starts. The
// multiplication is done from the origin every time, so monthly slots from
// a January 31 origin end on Feb 28 (29), Mar 31, Apr 30 — no drift — and a
// P1Y series from Feb 29 has its slots on Feb 28 in common years.
//
// Calendar parts (years, months, weeks, days) are added to the wall-clock
// reading in the zone; clock parts (hours, minutes, seconds) are added as
// absolute time. So a P1D slot in Europe/Berlin lasts 23 hours on
// 2026-03-29 and 25 hours on 2026-10-25, while PT1H slots always last 3600
// seconds and the local day has 23 or 25 of them.
//
// # Wall-clock readings that do not exist, or exist twice
//
// Adding calendar parts can land on a reading the zone skipped or repeated.
// The rule (that of RFC 5545 and java.time):
//
//   - Skipped (a DST gap): the reading is taken with the offset before the
//     gap, which moves it forward by the gap's length. Where DST starts at
//     midnight (America/Santiago, America/Havana), local midnight does not
//     exist on that day, so that day's P1D slot starts at 01:00 and lasts 23
//     hours; the next day's starts at 00:00 again.
//   - Repeated (clocks turned back): the earlier of the two instants.
//
// A zone that skipped a whole local date (Pacific/Apia jumped from
// 2011-12-29 to 2011-12-31) leaves a P1D series with no slot for it: the
// grid position exists but is empty, Slot returns ErrNoSlot for it, and
// Count, Slots and Next pass over it.
//
// Clock intervals in zones whose DST shift is not a whole number of hours
// (Australia/Lord_Howe, 30 minutes) keep their absolute spacing and so start
// at half past the local hour in one of the seasons.
//
// # Text forms
//
// An interval prints in its canonical shortest form (PT5M, P1D, P1W, P1M),
// which is its identity: see Interval for which spellings are the same
// interval. A slot prints as "<start>/<interval>" with the start in RFC 3339
// and the zone's offset, e.g. 2026-03-29T00:00:00+01:00/P1D, and the same
// slot always prints the same text. ParseSlot also accepts "<start>/<end>".
//
// # Limits
//
// Boundaries lie between MinTime() and MaxTime() (within the years 1 to 9999)
// with microsecond precision, PostgreSQL's. A slot exists only when both its
// start and its end do: an interval is at most P1000Y, an
// origin's first slot must end by MaxTime(), and a range holding the start of
// a slot that would end after it is refused. Dates are written with hyphens
// (2026-03-01); the ISO 8601 basic format (20260301) is refused, never
// guessed at.
//
// Every error for bad input matches ErrInvalid (errors.Is), says which kind
// of input was wrong (an invalid interval, time, zone, slot or range) and
// names the offending value, escaped.
package slot
