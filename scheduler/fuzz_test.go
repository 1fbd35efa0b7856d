package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

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
