package slot

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// ErrInvalid is matched (with errors.Is) by every error this package returns
// for bad input: a malformed interval, time, zone, name, reason or slot text, a
// reversed or oversized range, or an instant outside the supported years.
// Programs map it to "usage error"; the CLI exits 2 on it.
var ErrInvalid = errors.New("invalid input")

// Specific kinds of bad input. Each also matches ErrInvalid.
var (
	ErrInterval     error = inputError("invalid interval")
	ErrTime         error = inputError("invalid time")
	ErrZone         error = inputError("invalid time zone")
	ErrName         error = inputError("invalid series name")
	ErrSlot         error = inputError("invalid slot")
	ErrReason       error = inputError("invalid reason")
	ErrText         error = inputError("invalid text")
	ErrRange        error = inputError("invalid range")
	ErrTooManySlots error = inputError("too many slots")
	// ErrNoSlot is returned for a grid position whose local date the time
	// zone skipped entirely (Pacific/Apia skipped 2011-12-30), so the slot
	// there would be empty and does not exist.
	ErrNoSlot error = inputError("no such slot")
)

// NewInputError returns a sentinel for another kind of bad input, named by
// msg, that also matches ErrInvalid: the packages above this one declare
// theirs with it, so that every bad input shares one test.
func NewInputError(msg string) error { return inputError(msg) }

type inputError string

func (e inputError) Error() string { return string(e) }

// Is makes every inputError match ErrInvalid.
func (e inputError) Is(target error) bool { return target == ErrInvalid }

// abbreviate shortens s for an error message, at a character boundary, so
// that its quoted form (%q) stays about 64 characters long whatever s holds:
// an invalid byte or an escaped character quotes as four or more.
func abbreviate(s string) string {
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
