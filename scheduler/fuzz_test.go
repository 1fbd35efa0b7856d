package scheduler

import (
	"strings"
	"testing"
	"unicode/utf8"
)

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
