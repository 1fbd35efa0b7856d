package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/almanacdev/almanac/slot"
)

func FuzzParseCatchUp(f *testing.F) {
	for _, s := range []string{"all", "none", "latest:3", "latest 1", "latest:0", "latest:", "latest:1000001", "ALL", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := ParseCatchUp(in)
		if err != nil {
			if !errors.Is(err, slot.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line ErrInvalid: %v", in, err)
			}
			return
		}
		again, err := ParseCatchUp(c.String())
		if err != nil || again != c {
			t.Fatalf("%q → %s does not parse back: %v", in, c, err)
		}
	})
}

func FuzzCheckSchedule(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "@every 90s", "@hourly", "CRON_TZ=Europe/Berlin 30 2 * * *", "61 * * * *",
		"@every 0s", "@every -1m", "TZ=UTC 0 0 1 1 *", "0 0 31 2 *", "0 0 29 2 *", "0 0 30 2 1", ""} {
		f.Add(s)
	}
	g, err := slot.NewSeries("f", slot.MustParseInterval("PT5M"), nil, time.Time{})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := parseSchedule(spec)
		if err != nil {
			if !errors.Is(err, slot.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line ErrInvalid: %v", spec, err)
			}
			return
		}
		// An accepted schedule fires after now: one that never fires is
		// refused.
		next, err := trigger{schedule: s, grid: g}.next(now)
		if err != nil || !next.After(now) {
			t.Fatalf("%q was accepted but fires at %s (%v), not after %s", spec, next, err, now)
		}
	})
}

// FuzzStderrTail feeds arbitrary bytes, in arbitrary chunks, through the
// path a command's stderr takes to its slot's message: whatever the
// command writes, the message part is valid UTF-8 without NUL or other
// control characters but newline and tab, at most stderrTail bytes.
func FuzzStderrTail(f *testing.F) {
	for _, s := range []string{"", "disk full\n", "a\x00b\xff\xfe", "postgres://u:p@h/db\n", "é", strings.Repeat("€", 2000), "x\r\ny\r"} {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, out []byte, chunk uint8) {
		tail := &tailBuffer{max: stderrTail}
		lw := &lineWriter{tail: tail}
		for rest := out; len(rest) > 0; {
			n := min(len(rest), int(chunk)+1)
			if _, err := lw.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		lw.flush()
		msg := strings.TrimPrefix(tail.suffix(), ": ")
		if !utf8.ValidString(msg) || len(msg) > stderrTail {
			t.Fatalf("message %q: invalid or %d bytes", msg, len(msg))
		}
		for _, r := range msg {
			if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
				t.Fatalf("control character %U in %q", r, msg)
			}
		}
	})
}
