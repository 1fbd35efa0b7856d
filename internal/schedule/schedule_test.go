package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/input"
)

func at(t *testing.T, text string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, text)
	require.NoError(t, err)
	return tm
}

func TestParse(t *testing.T) {
	for _, tt := range []struct{ spec, now, want string }{
		{"*/5 * * * *", "2026-03-01T10:06:00Z", "2026-03-01T10:10:00Z"},
		{"@every 90s", "2026-03-01T10:00:00Z", "2026-03-01T10:01:30Z"},
		{"@hourly", "2026-03-01T10:06:00Z", "2026-03-01T11:00:00Z"},
		// 02:30 local does not exist on 2026-03-29 in Berlin; cron moves on
		// to the next day's 02:30.
		{"CRON_TZ=Europe/Berlin 30 2 * * *", "2026-03-28T12:00:00Z", "2026-03-30T00:30:00Z"},
		{"CRON_TZ=America/New_York 0 6 * * 1", "2026-11-22T12:00:00Z", "2026-11-23T11:00:00Z"},
	} {
		s, err := Parse(tt.spec)
		require.NoError(t, err, tt.spec)
		require.Equal(t, tt.want, Next(s, at(t, tt.now)).UTC().Format(time.RFC3339), tt.spec)
	}
	for _, bad := range []string{"", "* * *", "61 * * * *", "@every", "@every -5m", "@every 0s", "@every 500ms", "CRON_TZ=Mars/Base * * * * *", "@weird", "TZ=", "CRON_TZ=Europe/Berlin"} {
		_, err := Parse(bad)
		require.ErrorIs(t, err, input.ErrInvalid, "%q", bad)
		require.Contains(t, err.Error(), bad)
	}
}

// TestScheduleThatNeverFires: "0 0 30 2 *" (February 30) was accepted and
// the job silently never ran. A spec is refused unless it fires within ten
// years; a leap-day spec (every four years, eight across 2100) is accepted
// and found from any start, also where cron's own five-year search gives up.
func TestScheduleThatNeverFires(t *testing.T) {
	for _, never := range []string{"0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *", "CRON_TZ=Europe/Berlin 0 12 30 2 *", "0 0 31 11 *"} {
		_, err := Parse(never)
		require.ErrorIs(t, err, input.ErrInvalid, never)
		require.ErrorContains(t, err, "never fires", never)
		require.ErrorContains(t, err, never)
	}
	for _, tt := range []struct{ spec, now, want string }{
		{"0 0 29 2 *", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		// 2100 is no leap year: from 2097 cron finds nothing within five
		// years; the next leap day is in 2104.
		{"0 0 29 2 *", "2097-03-01T00:00:00Z", "2104-02-29T00:00:00Z"},
		// Day of month and day of week restricted together fire on either:
		// February 30 never comes, February's Mondays do.
		{"0 0 30 2 1", "2026-03-01T00:00:00Z", "2027-02-01T00:00:00Z"},
	} {
		s, err := Parse(tt.spec)
		require.NoError(t, err, tt.spec)
		require.Equal(t, tt.want, Next(s, at(t, tt.now)).UTC().Format(time.RFC3339), tt.spec)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "@every 90s", "@hourly", "CRON_TZ=Europe/Berlin 30 2 * * *", "61 * * * *",
		"@every 0s", "@every -1m", "TZ=UTC 0 0 1 1 *", "0 0 31 2 *", "0 0 29 2 *", "0 0 30 2 1", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec)
		if err != nil {
			if !errors.Is(err, input.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q is not a one-line ErrInvalid: %v", spec, err)
			}
			return
		}
		// An accepted schedule fires after now: one that never fires is
		// refused.
		if next := Next(s, now); !next.After(now) {
			t.Fatalf("%q was accepted but fires at %s, not after %s", spec, next, now)
		}
	})
}
