// Package safetext turns arbitrary bytes (a program's stderr, an error's
// text) into text that a PostgreSQL text column accepts and a reader can
// trust: valid UTF-8, no NUL and no other control characters but newline
// and tab, and at most a given number of bytes.
//
// PostgreSQL refuses a NUL character and invalid UTF-8 in text values, so
// a message made of raw bytes can make the very write that records a
// failure fail. Everything almanac stores as a message goes through Head or
// Tail first.
//
// The rules, applied in this order of reading:
//
//   - a byte that is not part of valid UTF-8 becomes U+FFFD (one per byte);
//   - "\r\n" becomes "\n", and any other "\r" becomes "\n";
//   - every other C0 control character (U+0000 to U+001F, NUL included)
//     except "\t" and "\n", DEL (U+007F) and the C1 controls (U+0080 to
//     U+009F) become U+FFFD;
//   - the result is cut at a character boundary to at most max bytes.
//
// Both functions are idempotent: cleaning clean text of at most max bytes
// returns it unchanged.
package safetext

import (
	"unicode/utf8"
)

// Head returns the beginning of s as clean text of at most max bytes: for
// messages whose first words say what failed (a Go error's text).
func Head(s string, max int) string {
	var out []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++ // "\r\n" is "\n"
			continue
		}
		piece := clean(r, n)
		if len(out)+len(piece) > max {
			break
		}
		out = append(out, piece...)
		i += n
	}
	return string(out)
}

// Tail returns the end of b as clean text of at most max bytes: for output
// whose last lines say what failed (a program's stderr). Leading UTF-8
// continuation bytes (at most three) are dropped rather than replaced: they
// are the rest of a character cut off before the window b shows.
func Tail(b []byte, max int) string {
	if max <= 0 {
		return ""
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	for k := 0; k < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); k++ {
		b = b[1:]
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
			continue
		}
		out = append(out, clean(r, n)...)
		i += n
	}
	// Replacements may have made it longer: keep the last max bytes,
	// starting on a character.
	if len(out) > max {
		cut := len(out) - max
		for cut < len(out) && !utf8.RuneStart(out[cut]) {
			cut++
		}
		out = out[cut:]
	}
	return string(out)
}

const replacement = "\uFFFD"

// clean returns the text one decoded rune stands for. A RuneError of width
// 1 is an invalid byte.
func clean(r rune, width int) string {
	switch {
	case r == utf8.RuneError && width == 1:
		return replacement
	case r == '\n' || r == '\t':
		return string(r)
	case r == '\r':
		return "\n"
	case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
		return replacement
	}
	return string(r)
}
