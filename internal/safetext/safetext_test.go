package safetext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestTail(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"disk full\n", 100, "disk full\n"},
		{"a\x00b", 100, "a\uFFFDb"},
		{"bad \xff\xfe byte", 100, "bad \uFFFD\uFFFD byte"},
		{"line\r\nnext\rover", 100, "line\nnext\nover"},
		{"tab\tbell\a esc\x1b[0m del\x7f c1\u0085", 100, "tab\tbell\uFFFD esc\uFFFD[0m del\uFFFD c1\uFFFD"},
		// The window starts in the middle of "é" (c3 a9): its second byte
		// is dropped, not replaced.
		{"é" + "abc", 4, "abc"},
		{"€" + "ab", 3, "ab"},
		{"abcdef", 3, "def"},
		{"", 10, ""},
		{"abc", 0, ""},
		// Replacements grow the text: the bound still holds, on a
		// character boundary.
		{"\x00\x00\x00", 5, "\uFFFD"},
		{"ok\x00", 4, "k\uFFFD"},
	} {
		got := Tail([]byte(tt.in), tt.max)
		require.Equal(t, tt.want, got, "Tail(%q, %d)", tt.in, tt.max)
		requireSafe(t, got, tt.max)
	}
}

func TestHead(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"handler: boom", 100, "handler: boom"},
		{"a\x00b\xffc", 100, "a\uFFFDb\uFFFDc"},
		{"abcdef", 3, "abc"},
		// "é" does not fit in the last byte: cut before it.
		{"abé", 3, "ab"},
		{"a\r\nb", 100, "a\nb"},
		{"a\r", 100, "a\n"},
		{strings.Repeat("x", 5000), 4096, strings.Repeat("x", 4096)},
	} {
		got := Head(tt.in, tt.max)
		require.Equal(t, tt.want, got, "Head(%q, %d)", tt.in, tt.max)
		requireSafe(t, got, tt.max)
	}
}

// requireSafe checks what every result promises.
func requireSafe(t *testing.T, s string, max int) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "valid UTF-8: %q", s)
	require.LessOrEqual(t, len(s), max, "%q", s)
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		require.False(t, r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f, "control character %U in %q", r, s)
	}
}

func FuzzTail(f *testing.F) {
	for _, s := range []string{"", "ok", "a\x00b", "\xff\xfe", "é", "\r\n\r", "\xe2\x82", strings.Repeat("€", 10)} {
		f.Add([]byte(s), uint16(8))
	}
	f.Fuzz(func(t *testing.T, b []byte, max uint16) {
		got := Tail(b, int(max))
		requireSafe(t, got, int(max))
		require.Equal(t, got, Tail([]byte(got), int(max)), "idempotent")
		if int(max) >= 3*len(b) && (len(b) == 0 || utf8.RuneStart(b[0])) {
			// Nothing is cut: both keep every character, in order.
			require.Equal(t, Head(string(b), int(max)), got)
		}
	})
}

func FuzzHead(f *testing.F) {
	for _, s := range []string{"", "ok", "a\x00b", "\xff\xfe", "é", "\r\n\r", "\xe2\x82", strings.Repeat("€", 10)} {
		f.Add(s, uint16(8))
	}
	f.Fuzz(func(t *testing.T, s string, max uint16) {
		got := Head(s, int(max))
		requireSafe(t, got, int(max))
		require.Equal(t, got, Head(got, int(max)), "idempotent")
		require.True(t, strings.HasPrefix(Head(s, int(max)+100), got), "a larger bound keeps more of the beginning")
	})
}
