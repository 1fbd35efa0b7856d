package input_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

func oneLineInvalid(t *testing.T, in string, err error, kind error) {
	t.Helper()
	if !errors.Is(err, kind) || !errors.Is(err, input.ErrInvalid) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error for %q is not a one-line %v: %v", in, kind, err)
	}
}

// TestNamesRefuseInvisibleCharacters: two series whose names differ only by
// a character that prints as nothing (a zero-width space, a bidirectional
// override) would look identical in every listing, so such names are
// refused when a series is registered.
func TestNamesRefuseInvisibleCharacters(t *testing.T) {
	for _, bad := range []string{
		"report\u200b",        // zero-width space
		"\u202eroper",         // right-to-left override
		"rep\u2066ort\u2069",  // isolate
		"re\u200dport",        // zero-width joiner
		"\ufeffreport",        // byte order mark
		"re\u00adport",        // soft hyphen
		"line\u2028separator", // line separator
		"para\u2029separator", // paragraph separator
		"\u061creport",        // Arabic letter mark
		"report\U000e0001",    // language tag
	} {
		err := input.CheckName(bad)
		require.ErrorIs(t, err, input.ErrName, "%q", bad)
		require.ErrorIs(t, err, input.ErrInvalid)
		require.Contains(t, err.Error(), "invisible", "%q: %v", bad, err)
		require.NotContains(t, err.Error(), "\n")
		// The message shows the character escaped, never raw.
		for _, r := range bad {
			if r > 0x7f {
				require.NotContains(t, err.Error(), string(r), "%q is printed raw", r)
			}
		}
	}
	for _, ok := range []string{"report", "Grüße", "名前", "emoji📈", "עברית", "tab-free name", "a'b;c"} {
		require.NoError(t, input.CheckName(ok), "%q", ok)
	}
}

func TestCheckReason(t *testing.T) {
	for _, ok := range []string{"", "late invoices", "tab\tand\nnewline", "Grüße 名前 📈", strings.Repeat("x", input.MaxReasonLen),
		strings.Repeat("é", input.MaxReasonLen/2)} {
		require.NoError(t, input.CheckReason(ok), "%q", ok)
	}
	for _, tt := range []struct{ in, want string }{
		{"bad\xffutf8", "not valid UTF-8"},
		{"nul\x00", "control character U+0000"},
		{"cr\r", "control character U+000D"},
		{"esc\x1b[31m", "control character U+001B"},
		{"del\x7f", "control character U+007F"},
		{"c1\u0085", "control character U+0085"},
		{"\u202eoverride", "invisible character U+202E"},
		{"zero\u200bwidth", "invisible character U+200B"},
		{"ls\u2028", "invisible character U+2028"},
		{strings.Repeat("x", input.MaxReasonLen+1), "1025 bytes; expected at most 1024"},
		{strings.Repeat("é", input.MaxReasonLen/2+1), "1026 bytes"},
	} {
		err := input.CheckReason(tt.in)
		require.ErrorIs(t, err, input.ErrReason, "%q", tt.in)
		require.ErrorIs(t, err, input.ErrInvalid)
		require.Contains(t, err.Error(), tt.want, "%q", tt.in)
		require.NotContains(t, err.Error(), "\n")
		require.LessOrEqual(t, len(err.Error()), 200, "a long reason is abbreviated in the message")
		require.True(t, utfValid(err.Error()), "%q", err.Error())
	}
}

func utfValid(s string) bool { return strings.ToValidUTF8(s, "?") == s }

func TestPrintableName(t *testing.T) {
	for in, want := range map[string]string{
		"sensor":         "sensor",
		"Grüße 名前":       "Grüße 名前",
		"sensor\u200b":   `"sensor\u200b"`,
		"\u202erosnes":   `"\u202erosnes"`,
		`"sensor"`:       `"\"sensor\""`,
		"sensor ":        `"sensor "`,
		"sen\u00a0sor":   `"sen\u00a0sor"`,
		"bad\xff":        `"bad\xff"`,
		"tab\there":      `"tab\there"`,
		"line\u2028sep":  `"line\u2028sep"`,
		"inner space ok": "inner space ok",
	} {
		require.Equal(t, want, input.PrintableName(in), "%q", in)
	}
	s, err := slot.NewSeries("sensor\u200b", mustInterval("PT5M"), nil, time.Time{})
	require.NoError(t, err)
	require.Equal(t, `"sensor\u200b" PT5M (UTC, origin 2000-01-01T00:00:00Z)`, s.String())
}

func TestCheckText(t *testing.T) {
	for _, ok := range []string{"", "ops@ci (deploy 42)", "Grüße", strings.Repeat("a", 200)} {
		require.NoError(t, input.CheckText("actor", ok, 200), "%q", ok)
	}
	for _, tt := range []struct{ in, want string }{
		{"a\tb", `invalid text: actor "a\tb": contains control character U+0009`},
		{"a\nb", "control character U+000A"},
		{"bad\xff", "not valid UTF-8"},
		{"\u200bops", "invisible character U+200B"},
		{strings.Repeat("a", 201), "201 bytes; expected at most 200"},
	} {
		err := input.CheckText("actor", tt.in, 200)
		require.ErrorIs(t, err, input.ErrText, "%q", tt.in)
		require.ErrorIs(t, err, input.ErrInvalid)
		require.ErrorContains(t, err, tt.want)
	}
}

// FuzzCheckName: a name is accepted only when every character prints as
// itself, and the error names it escaped on one line.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"report", "", "a\x00b", "sensor\u200b", "\u202eroper", "Grüße", "a\u2028b", "bad\xff", strings.Repeat("n", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := input.CheckName(name)
		if err != nil {
			oneLineInvalid(t, name, err, input.ErrName)
			return
		}
		if name == "" || len(name) > input.MaxNameLen || !utf8.ValidString(name) {
			t.Fatalf("%q accepted", name)
		}
		for _, r := range name {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("%q accepted with %U", name, r)
			}
		}
		if _, err := slot.NewSeries(name, mustInterval("PT5M"), nil, time.Time{}); err != nil {
			t.Fatalf("%q passes CheckName but not NewSeries: %v", name, err)
		}
	})
}

// FuzzCheckReason: a reason is accepted only when it is at most 1 KiB of
// UTF-8 without control characters but tab and newline, and without
// invisible characters.
func FuzzCheckReason(f *testing.F) {
	for _, s := range []string{"late invoices", "", "tab\tnewline\n", "cr\r", "bad\xff", "\u202e", strings.Repeat("é", 513)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		err := input.CheckReason(reason)
		if err != nil {
			oneLineInvalid(t, reason, err, input.ErrReason)
			if !utf8.ValidString(err.Error()) || len(err.Error()) > 300 {
				t.Fatalf("the error for %q is not short valid UTF-8: %q", reason, err)
			}
			return
		}
		if len(reason) > input.MaxReasonLen || !utf8.ValidString(reason) {
			t.Fatalf("%q accepted", reason)
		}
		for _, r := range reason {
			if r != '\t' && r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029') {
				t.Fatalf("%q accepted with %U", reason, r)
			}
		}
	})
}

// FuzzPrintableName: a printed name shows no invisible or control character
// raw, and two different names never print alike.
func FuzzPrintableName(f *testing.F) {
	for _, s := range [][2]string{{"sensor", "sensor\u200b"}, {"\u202erosnes", "sensor"}, {`"sensor"`, "sensor"},
		{`"sensor\u200b"`, "sensor\u200b"}, {"sensor ", "sensor"}, {"sensor\u00a0", "sensor "}, {"\xff", "\ufffd"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		pa, pb := input.PrintableName(a), input.PrintableName(b)
		if a != b && pa == pb {
			t.Fatalf("%q and %q both print as %s", a, b, pa)
		}
		if !utf8.ValidString(pa) {
			t.Fatalf("%q prints as invalid UTF-8", a)
		}
		for _, r := range pa {
			if !unicode.IsGraphic(r) || unicode.IsSpace(r) && r != ' ' {
				t.Fatalf("%q prints with %U raw: %s", a, r, pa)
			}
		}
	})
}
