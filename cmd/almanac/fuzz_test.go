package main

import (
	"strings"
	"testing"
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
