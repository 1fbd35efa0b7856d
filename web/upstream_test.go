package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/web"
)

// TestAPIWaitingOn: the failures answer of a series waiting for its
// upstream counts its waiting slots and lists what they wait on (an open
// upstream hour, a parked one with its failure, a part without rows);
// a series without upstreams gets neither.
func TestAPIWaitingOn(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	ingest, err := c.Series(ctx, "ingest", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	report, err := c.Series(ctx, "report", "P1D", almanac.SeriesOptions{After: []almanac.Series{ingest}})
	require.NoError(t, err)
	day := time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	_, err = c.Materialize(ctx, report, day, day.AddDate(0, 0, 1), almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = c.Materialize(ctx, ingest, day, day.Add(2*time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET not_before = 'infinity', message = 'source <offline>'
		WHERE name = 'ingest' AND slot_start = $1`, db.Schema), day.Add(time.Hour))
	require.NoError(t, err)
	srv := serve(t, web.Handler(c, web.Options{CacheTTL: -1}))

	type entry struct{ Slot, Series, Interval, Query, From, To, State, Message string }
	var f struct {
		WaitingUpstream int64
		WaitingOn       []entry
	}
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/failures?series=report&interval=P1D", &f))
	require.EqualValues(t, 1, f.WaitingUpstream)
	w := func(from, to time.Time, state, message string) entry {
		return entry{Slot: "2026-03-04T00:00:00Z", Series: "ingest", Interval: "PT1H", Query: "interval=PT1H&series=ingest",
			From: from.Format(time.RFC3339), To: to.Format(time.RFC3339), State: state, Message: message}
	}
	require.Equal(t, []entry{
		w(day, day.Add(time.Hour), "open", ""),
		w(day.Add(time.Hour), day.Add(2*time.Hour), "parked", "source <offline>"),
		w(day.Add(2*time.Hour), day.Add(24*time.Hour), "missing", ""),
	}, f.WaitingOn)

	f.WaitingUpstream, f.WaitingOn = 0, nil
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/failures?series=ingest&interval=PT1H", &f))
	require.Zero(t, f.WaitingUpstream)
	require.Nil(t, f.WaitingOn)
}
