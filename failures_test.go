package almanac_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/almanactest"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// TestFailures lists the failed and parked slots of one series, latest
// failure first, and of every series, in order of series and slot, with a
// limit; finished, open and in-flight slots are left out.
func TestFailures(t *testing.T) {
	ctx := context.Background()
	schema := almanactest.Schema(t)
	c := almanactest.Client(t, almanac.Options{Schema: schema})
	berlin, err := c.Series(ctx, "hm", "PT1H", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	other, err := c.Series(ctx, "other", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	loc := berlin.Location()
	at := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, loc) }
	from, to := at(29, 0), at(31, 0)
	for _, s := range []almanac.Series{berlin, other} {
		_, err := c.Materialize(ctx, s, from, to, almanac.WriteOptions{})
		require.NoError(t, err)
	}
	pool := almanactest.Pool(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sqlschema.Render(sql, schema), args...)
		require.NoError(t, err)
	}
	exec(`UPDATE {{schema}}.slot SET fail_count = 1, not_before = $2, message = 'disk full', updated_at = now() - interval '1 hour'
		WHERE name = 'hm' AND slot_start = $1`, at(29, 4), at(29, 5))
	exec(`UPDATE {{schema}}.slot SET fail_count = 3, not_before = 'infinity', message = 'bad input' WHERE name = 'hm' AND slot_start = $1`, at(29, 5))
	exec(`UPDATE {{schema}}.slot SET fail_count = 2, not_before = NULL, message = 'timeout', updated_at = now() - interval '1 day'
		WHERE name = 'hm' AND slot_start = $1`, at(30, 1))
	exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() + interval '1 hour', fail_count = 1
		WHERE name = 'hm' AND slot_start = $1`, at(29, 6))
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', fail_count = 0 WHERE name = 'hm' AND slot_start = $1`, at(29, 7))
	exec(`UPDATE {{schema}}.slot SET fail_count = 1, message = 'other' WHERE name = 'other' AND slot_start = $1`, at(29, 0))

	fs, more, err := c.Failures(ctx, almanac.FailuresOptions{Name: "hm", Interval: "PT1H", From: from, To: to, Latest: true})
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, fs, 3, "the in-flight slot's outcome is pending")
	require.True(t, fs[0].Parked)
	require.Equal(t, "bad input", fs[0].Message)
	require.Equal(t, at(29, 5), fs[0].Start)
	require.Equal(t, loc, fs[0].Start.Location(), "in the series' zone")
	require.Equal(t, "disk full", fs[1].Message)
	require.Equal(t, at(29, 5), fs[1].NotBefore)
	require.Equal(t, "timeout", fs[2].Message, "a failed slot due for its retry now")
	require.False(t, fs[2].Parked)
	require.True(t, fs[2].NotBefore.IsZero())

	all, more, err := c.Failures(ctx, almanac.FailuresOptions{Limit: 3})
	require.NoError(t, err)
	require.True(t, more, "four failed slots, three listed")
	require.Equal(t, []string{"hm", "hm", "hm"}, []string{all[0].Name, all[1].Name, all[2].Name})
	require.Equal(t, []time.Time{at(29, 4), at(29, 5), at(30, 1)}, []time.Time{all[0].Start, all[1].Start, all[2].Start}, "in order of series and slot")
	named, _, err := c.Failures(ctx, almanac.FailuresOptions{Name: "other"})
	require.NoError(t, err)
	require.Len(t, named, 1)
	require.Equal(t, "PT1H", named[0].Interval)

	_, _, err = c.Failures(ctx, almanac.FailuresOptions{Interval: "PT1H"})
	require.ErrorIs(t, err, almanac.ErrInvalid, "an interval without a name")
	_, _, err = c.Failures(ctx, almanac.FailuresOptions{From: to, To: from})
	require.ErrorIs(t, err, almanac.ErrInvalid, "an empty range")
}
