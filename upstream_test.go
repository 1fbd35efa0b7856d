package almanac_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// reportAfterIngest returns a migrated schema with a PT1H series ingest
// and a P1D series report in zone after it, and a client of it.
func reportAfterIngest(t *testing.T, zone string) (*pgtest.DB, *almanac.Client, almanac.Series, almanac.Series) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	ingest, err := c.Series(ctx, "ingest", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	report, err := c.Series(ctx, "report", "P1D", almanac.SeriesOptions{TimeZone: zone, After: []almanac.Series{ingest}})
	require.NoError(t, err)
	return db, c, ingest, report
}

// TestHandlersSeeUpstreamGenerations: a handler of a P1D report in
// Europe/Berlin after a PT1H ingest is told which ingest hours its 23-hour
// DST day covers, each with its generation and the keys the ingest's own
// handler saw, in locked and in lease mode; after an ingest hour is
// re-opened and recomputed, the report's next run sees that hour's new
// generation. A series without dependencies gets no list.
func TestHandlersSeeUpstreamGenerations(t *testing.T) {
	ctx := context.Background()
	db, c, ingest, report := reportAfterIngest(t, "Europe/Berlin")
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	day := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin) // 23 hours
	next := day.AddDate(0, 0, 1)

	// The ingest runs through almanac, recording the keys its handler saw.
	var mu sync.Mutex // handlers run concurrently
	seen := map[string]bool{}
	runIngest := func() {
		t.Helper()
		d, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
		require.NoError(t, err)
		require.NoError(t, d.Register(almanac.Job{Series: ingest, From: day, To: next,
			Handler: func(_ context.Context, _ pgx.Tx, s almanac.Slot) error {
				require.Nil(t, s.Upstream, "ingest has no upstream")
				mu.Lock()
				defer mu.Unlock()
				seen[s.ComputationKey()] = true
				return nil
			}}))
		_, err = d.Drain(ctx)
		require.NoError(t, err)
	}
	runIngest()
	require.Len(t, seen, 23)

	var got []almanac.Slot
	runReport := func(lease bool) almanac.Slot {
		t.Helper()
		got = nil
		d, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
		require.NoError(t, err)
		job := almanac.Job{Series: report, From: day, To: next}
		if lease {
			job.LeaseHandler = func(_ context.Context, l *almanac.Lease) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, l.Slot)
				return nil
			}
		} else {
			job.Handler = func(_ context.Context, _ pgx.Tx, s almanac.Slot) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, s)
				return nil
			}
		}
		require.NoError(t, d.Register(job))
		_, err = d.Drain(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0]
	}
	check := func(s almanac.Slot, reopened time.Time, gen int64) {
		t.Helper()
		require.Len(t, s.Upstream, 23, "every ingest hour of the 23-hour day")
		for i, u := range s.Upstream {
			require.Equal(t, "ingest", u.Name)
			require.Equal(t, day.Add(time.Duration(i)*time.Hour).UTC(), u.Start.UTC(), "in slot order")
			require.Equal(t, u.Start.Add(time.Hour), u.End)
			want := int64(1)
			if u.Start.Equal(reopened) {
				want = gen
			}
			require.Equal(t, want, u.Generation, u.Key())
			require.True(t, seen[u.ComputationKey()], "%s is the key the ingest's handler saw", u.ComputationKey())
			g, err := ingest.Floor(u.Start)
			require.NoError(t, err)
			require.Equal(t, g, u.Slot, "the upstream's own slot, index included")
		}
	}
	first := runReport(false)
	require.EqualValues(t, 1, first.Generation)
	check(first, time.Time{}, 1)

	// An ingest hour re-opened and recomputed: the report's day re-opens,
	// and its next run (in lease mode) covers the hour's generation 2.
	hour := day.Add(5 * time.Hour)
	_, err = c.Reopen(ctx, ingest, hour, hour.Add(time.Hour), almanac.WriteOptions{Reason: "late rows"})
	require.NoError(t, err)
	runIngest()
	require.True(t, seen[fmt.Sprintf("ingest %s/PT1H 2", hour.UTC().Format(time.RFC3339))], "the hour ran again as generation 2")
	second := runReport(true)
	require.EqualValues(t, 2, second.Generation)
	check(second, hour, 2)

	// The claim reads the list only for a series with dependencies.
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`DELETE FROM {{schema}}.series_dependency`, db.Schema))
	require.NoError(t, err)
	_, err = c.Reopen(ctx, report, day, next, almanac.WriteOptions{Reason: "again"})
	require.NoError(t, err)
	require.Nil(t, runReport(false).Upstream)
}

// TestStatusListsWhatWaitingSlotsWaitOn: a report day waiting for its
// ingest lists the ingest hours it waits on, with their state and
// failure, and the hours without a row as one MISSING part; the list is
// bounded, and empty once nothing waits.
func TestStatusListsWhatWaitingSlotsWaitOn(t *testing.T) {
	ctx := context.Background()
	db, c, ingest, report := reportAfterIngest(t, "UTC")
	day := time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(t, err)
	}
	_, err := c.Materialize(ctx, report, day, day.AddDate(0, 0, 30), almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = c.Materialize(ctx, ingest, day, day.Add(20*time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE name = 'ingest' AND slot_start < $1`, day.Add(18*time.Hour))
	exec(`UPDATE {{schema}}.slot SET not_before = 'infinity', fail_count = 3, message = 'source offline' WHERE name = 'ingest' AND slot_start = $1`, day.Add(18*time.Hour))

	st, err := c.Status(ctx, report, day, day.AddDate(0, 0, 30))
	require.NoError(t, err)
	require.EqualValues(t, 30, st.WaitingUpstream)
	require.Len(t, st.WaitingOn, 20, "bounded")
	first := st.WaitingOn[:3]
	for _, n := range first {
		require.Equal(t, day, n.Waiting)
		require.Equal(t, "ingest", n.Name)
		require.Equal(t, "PT1H", n.Interval)
	}
	require.Equal(t, []string{"AVAILABLE", "AVAILABLE", "MISSING"}, []string{first[0].Status, first[1].Status, first[2].Status})
	require.Equal(t, day.Add(18*time.Hour), first[0].Start)
	require.Equal(t, day.Add(19*time.Hour), first[0].End)
	require.True(t, first[0].Parked)
	require.Equal(t, "source offline", first[0].Message)
	require.False(t, first[0].At.IsZero())
	require.False(t, first[1].Parked)
	require.Equal(t, day.Add(20*time.Hour), first[2].Start, "the hours without a row, as one part")
	require.Equal(t, day.Add(24*time.Hour), first[2].End)
	require.True(t, first[2].At.IsZero())
	next := st.WaitingOn[3]
	require.Equal(t, day.AddDate(0, 0, 1), next.Waiting, "then the next waiting day")
	require.Equal(t, "MISSING", next.Status)

	exec(`DELETE FROM {{schema}}.series_dependency`)
	st, err = c.Status(ctx, report, day, day.AddDate(0, 0, 30))
	require.NoError(t, err)
	require.Zero(t, st.WaitingUpstream)
	require.Nil(t, st.WaitingOn)
}
