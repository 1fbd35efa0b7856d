// Package input checks what people give almanac: series names, reasons,
// actors and other free text. Every error for bad input, in every package,
// matches the one sentinel ErrInvalid here; the public packages re-export
// that value (slot.ErrInvalid, almanac.ErrInvalid), so errors.Is works
// whichever layer returned the error. The CLI and the coverage page use the
// checks before anything reaches the database.
package input

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// ErrInvalid is matched (with errors.Is) by every error almanac returns for
// bad input: a malformed interval, time, zone, name, reason or slot text, a
// reversed or oversized range, an invalid schema name or option. Programs
// map it to "usage error"; the CLI exits 2 on it.
var ErrInvalid = errors.New("invalid input")

// Kind returns a sentinel for one kind of bad input, named by msg, that also
// matches ErrInvalid: errors wrap it to say what was wrong, and every bad
// input still shares one test.
func Kind(msg string) error { return kind(msg) }

type kind string

func (e kind) Error() string { return string(e) }

// Is makes every kind match ErrInvalid.
func (e kind) Is(target error) bool { return target == ErrInvalid }

// Kinds of bad text. Each matches ErrInvalid.
var (
	ErrName   = Kind("invalid series name")
	ErrReason = Kind("invalid reason")
	ErrText   = Kind("invalid text")
)

// Abbreviate shortens s for an error message, at a character boundary, so
// that its quoted form (%q) stays about 64 characters long whatever s holds:
// an invalid byte or an escaped character quotes as four or more.
func Abbreviate(s string) string {
	const max = 64
	width := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		w := len(`\xff`)
		if r != utf8.RuneError || n > 1 {
			w = len(strconv.QuoteRune(r)) - len(`''`)
		}
		if width+w > max {
			return s[:i] + "…"
		}
		width += w
		i += n
	}
	return s
}
