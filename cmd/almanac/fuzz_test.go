package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT1M", "1m", "90s", "P1D", "-PT1M", "-1s", "0s", "PT0S", "1h30m", "", "5 minutes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		d, err := parseDuration("lag", in)
		if err != nil {
			if exitCode(err) != exitUsage || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line usage error: %v", in, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q parsed to a negative duration %s", in, d)
		}
	})
}

// FuzzPrintable: a printed name shows no invisible or control character
// raw, and two different names never print alike.
func FuzzPrintable(f *testing.F) {
	for _, s := range [][2]string{{"sensor", "sensor\u200b"}, {"\u202erosnes", "sensor"}, {`"sensor"`, "sensor"},
		{`"sensor\u200b"`, "sensor\u200b"}, {"sensor ", "sensor"}, {"sensor\u00a0", "sensor "}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		pa, pb := printable(a), printable(b)
		if a != b && pa == pb {
			t.Fatalf("%q and %q both print as %s", a, b, pa)
		}
		if !utf8.ValidString(pa) {
			t.Fatalf("%q prints as invalid UTF-8", a)
		}
		for _, r := range pa {
			if hidden(r) {
				t.Fatalf("%q prints with %U raw: %s", a, r, pa)
			}
		}
	})
}
