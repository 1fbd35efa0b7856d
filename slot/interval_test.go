package slot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/slot"
)

func TestParseIntervalCanonical(t *testing.T) {
	tests := []struct {
		in, canonical string
		months, days  int64
		clock         time.Duration
	}{
		{"PT5M", "PT5M", 0, 0, 5 * time.Minute},
		{"PT1H", "PT1H", 0, 0, time.Hour},
		{"PT60M", "PT1H", 0, 0, time.Hour},
		{"PT3600S", "PT1H", 0, 0, time.Hour},
		{"PT90S", "PT1M30S", 0, 0, 90 * time.Second},
		{"PT1.5H", "PT1H30M", 0, 0, 90 * time.Minute},
		{"PT1H30.5M", "PT1H30M30S", 0, 0, 90*time.Minute + 30*time.Second},
		{"PT0.1S", "PT0.1S", 0, 0, 100 * time.Millisecond},
		{"PT0.000001S", "PT0.000001S", 0, 0, time.Microsecond},
		{"PT24H", "PT24H", 0, 0, 24 * time.Hour},
		{"PT36H", "PT36H", 0, 0, 36 * time.Hour},
		{"P1D", "P1D", 0, 1, 0},
		{"P1W", "P1W", 0, 7, 0},
		{"P7D", "P1W", 0, 7, 0},
		{"P14D", "P2W", 0, 14, 0},
		{"P8D", "P8D", 0, 8, 0},
		{"P1W1D", "P8D", 0, 8, 0},
		{"P1M", "P1M", 1, 0, 0},
		{"P3M", "P3M", 3, 0, 0},
		{"P12M", "P1Y", 12, 0, 0},
		{"P18M", "P1Y6M", 18, 0, 0},
		{"P1Y", "P1Y", 12, 0, 0},
		{"P1DT12H", "P1DT12H", 0, 1, 12 * time.Hour},
		{"P1MT1H", "P1MT1H", 1, 0, time.Hour},
		{"P1M7D", "P1M7D", 1, 7, 0},
		{"P7DT1H", "P7DT1H", 0, 7, time.Hour},
		{"P0DT5M", "PT5M", 0, 0, 5 * time.Minute},
		{"P0Y0M0W1D", "P1D", 0, 1, 0},
		{"P001D", "P1D", 0, 1, 0},
		{"P1000Y", "P1000Y", 1000 * 12, 0, 0},
		{"P1Y2M3W4DT5H6M7.25S", "P1Y2M25DT5H6M7.25S", 14, 25, 5*time.Hour + 6*time.Minute + 7250*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			iv, err := slot.ParseInterval(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.canonical, iv.String())
			require.Equal(t, tt.months, iv.Months())
			require.Equal(t, tt.days, iv.Days())
			require.Equal(t, tt.clock, iv.Clock())
			require.Equal(t, tt.months == 0 && tt.days == 0, iv.Fixed())
			again, err := slot.ParseInterval(iv.String())
			require.NoError(t, err)
			require.Equal(t, iv, again, "the canonical form parses back to the same interval")
		})
	}
}

func TestIntervalIdentity(t *testing.T) {
	same := [][2]string{{"P7D", "P1W"}, {"P12M", "P1Y"}, {"PT60M", "PT1H"}, {"PT1.5H", "PT90M"}}
	for _, p := range same {
		require.Equal(t, mustInterval(p[0]), mustInterval(p[1]), "%s and %s", p[0], p[1])
	}
	// PostgreSQL's interval type equates these; almanac must not.
	different := [][2]string{{"P1D", "PT24H"}, {"P1M", "P30D"}, {"P1Y", "P365D"}, {"P1W", "PT168H"}}
	for _, p := range different {
		require.NotEqual(t, mustInterval(p[0]), mustInterval(p[1]), "%s and %s", p[0], p[1])
	}
}

func TestParseIntervalRejects(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "does not start with P"},
		{"P", "no components"},
		{"PT", "no components"},
		{"P1DT", "T is not followed"},
		{"5m", "does not start with P"},
		{"pt5m", "does not start with P"},
		{"5", "does not start with P"},
		{"T5M", "does not start with P"},
		{"P1.5M", "fractional months"},
		{"P0.5Y", "fractional years"},
		{"P1.5W", "fractional weeks"},
		{"P1.5D", "fractional days"},
		{"PT-5M", "expected a number"},
		{"-P1D", "negative"},
		{"-PT5M", "negative"},
		{"P0D", "zero length"},
		{"PT0S", "zero length"},
		{"P0Y0M0DT0H0M0S", "zero length"},
		{"P1D1D", "repeated, out of order"},
		{"P1M1Y", "repeated, out of order"},
		{"PT1M1H", "repeated, out of order"},
		{"PT1D", "repeated, out of order or on the wrong side of T"},
		{"P1H", "repeated, out of order or on the wrong side of T"},
		{"P1S", "repeated, out of order or on the wrong side of T"},
		{"PT1H1H", "repeated"},
		{"PTT1H", "T appears twice"},
		{"P1DT1HT1M", "T appears twice"},
		{"P1", "has no designator"},
		{"PT5", "has no designator"},
		{"PD", "expected a number"},
		{"P1X", "unexpected character"},
		{"P1d", "unexpected character"},
		{"PT5m", "unexpected character"},
		{"P 1D", "expected a number"},
		{"P1D ", "expected a number"},
		{" P1D", "does not start with P"},
		{"P1e3D", "unexpected character"},
		{"PT0,5S", "decimal comma"},
		{"PT1.S", "decimal point without digits"},
		{"PT.5S", "expected a number"},
		{"PT1.5H30M", "only the last component may have a fraction"},
		{"P١D", "expected a number"}, // an Arabic-Indic digit
		{"PT0.0000001S", "finer than a microsecond"},
		{"PT0.0000005S", "finer than a microsecond"},
		{"P10000Y", "too large"},
		{"P99999999999999999999D", "too large"},
		{"PT2562048H", "too large"},
		{"PT99999999999999999999S", "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := slot.ParseInterval(tt.in)
			require.Error(t, err)
			require.ErrorIs(t, err, slot.ErrInterval)
			require.ErrorIs(t, err, slot.ErrInvalid)
			require.Contains(t, err.Error(), tt.want)
			require.Contains(t, err.Error(), `"`+tt.in+`"`, "the error names the input")
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

func TestIntervalText(t *testing.T) {
	var iv slot.Interval
	require.NoError(t, iv.UnmarshalText([]byte("PT60M")))
	b, err := iv.MarshalText()
	require.NoError(t, err)
	require.Equal(t, "PT1H", string(b))
	require.Error(t, iv.UnmarshalText([]byte("P0D")))
	_, err = slot.Interval{}.MarshalText()
	require.ErrorIs(t, err, slot.ErrInterval)
	require.True(t, slot.Interval{}.IsZero())
	require.Panics(t, func() { mustInterval("nope") })
}

func FuzzParseInterval(f *testing.F) {
	for _, s := range []string{"PT5M", "P1D", "P1W", "P1M", "P1Y6M", "P1DT12H", "PT1.5H", "PT0.000001S",
		"P", "PT", "P1.5M", "PT-5M", "P0D", "5m", "-P1D", "PT1H30.5M", "P1Y2M3W4DT5H6M7.25S", "PT2562047H47M16.854775S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		iv, err := slot.ParseInterval(in)
		if err != nil {
			if !errors.Is(err, slot.ErrInterval) || !errors.Is(err, slot.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line ErrInterval: %v", in, err)
			}
			return
		}
		if iv.IsZero() || iv.Months() < 0 || iv.Days() < 0 || iv.Clock() < 0 {
			t.Fatalf("%q parsed to a non-positive interval %#v", in, iv)
		}
		canonical := iv.String()
		again, err := slot.ParseInterval(canonical)
		if err != nil || again != iv || again.String() != canonical {
			t.Fatalf("%q → %s does not parse back to itself: %v %v", in, canonical, again, err)
		}
	})
}
