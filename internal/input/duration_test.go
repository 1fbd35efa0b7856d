package input

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	day := 24 * time.Hour
	for text, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "1h30m": 90 * time.Minute, "250ms": 250 * time.Millisecond, "0s": 0, "0": 0,
		"90d": 90 * day, "1d": day, "1d2h": 26 * time.Hour, "1d12h30m": 36*time.Hour + 30*time.Minute, "0d": 0,
		"PT1M": time.Minute, "PT10M": 10 * time.Minute, "P1D": day, "PT24H": day, "P1W": 7 * day, "P1DT12H": 36 * time.Hour,
		"PT1.5S": 1500 * time.Millisecond, "PT0S": 0, "P2W3DT4H5M6S": 17*day + 4*time.Hour + 5*time.Minute + 6*time.Second,
		"100000d": 100_000 * day, "P100000D": 100_000 * day,
	} {
		got, err := ParseDuration(text)
		require.NoError(t, err, text)
		require.Equal(t, want, got, text)
	}
	for text, msg := range map[string]string{
		"":               `invalid duration "": expected a length of time, e.g. 90s`,
		"-1s":            `invalid duration "-1s": expected`,
		"-P1D":           `invalid duration "-P1D": expected`,
		"1.5d":           "expected",
		"d":              "expected",
		"1d-2h":          "expected",
		"1d1d":           "expected",
		"P":              "expected",
		"PT":             "expected",
		"P1DT":           "expected",
		"P1H":            "expected",
		"PT1D":           "expected",
		"P1M":            `invalid duration "P1M": years and months have no fixed length; use days (P30D, 30d)`,
		"P1Y2D":          "years and months",
		"100001d":        "expected",
		"P14286W":        "expected",
		"5 minutes":      "expected",
		"9999999999999h": "expected",
	} {
		_, err := ParseDuration(text)
		require.Error(t, err, text)
		require.True(t, errors.Is(err, ErrInvalid), text)
		require.Contains(t, err.Error(), msg, text)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT1M", "1m", "90s", "P1D", "-PT1M", "-1s", "0s", "PT0S", "1h30m", "", "5 minutes", "90d", "1d2h", "P1DT1.5S", "P1M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		d, err := ParseDuration(in)
		if err != nil {
			if !errors.Is(err, ErrDuration) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line duration error: %v", in, err)
			}
			return
		}
		if d < 0 || d > maxDays*24*time.Hour {
			t.Fatalf("%q parsed to %s, outside [0, %d days]", in, d, maxDays)
		}
		// Go's own syntax means what Go says it means.
		if gd, gerr := time.ParseDuration(in); gerr == nil && gd >= 0 && !strings.HasPrefix(in, "+") && d != gd {
			t.Fatalf("%q: %s, Go says %s", in, d, gd)
		}
	})
}
