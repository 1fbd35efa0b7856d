package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

// fetch GETs u, naming etag in If-None-Match when set, and returns the
// status, the ETag and Almanac-As-Of headers, and the body.
func fetch(t *testing.T, u, etag string) (int, string, string, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	require.NoError(t, err)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header.Get("ETag"), res.Header.Get("Almanac-As-Of"), body
}

// TestAPIUnchanged checks the answers a refreshing page asks for: each has
// an entity tag and says when its data were read; asked again with the
// tag, an unchanged answer is a 304 without a body, a changed one a 200
// with a new tag.
func TestAPIUnchanged(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{CacheTTL: -1})
	for _, path := range []string{"/api/series", "/api/heatmap?series=orders&interval=PT1H", "/api/failures?series=orders&interval=PT1H",
		"/api/history?series=orders&interval=PT1H&slot=2026-03-29T10:00:00%2B02:00"} {
		code, tag, asOf, body := fetch(t, srv.URL+path, "")
		require.Equal(t, http.StatusOK, code, path)
		require.Regexp(t, `^"[0-9a-f]{32}"$`, tag, path)
		require.Regexp(t, `^\d\d:\d\d:\d\d [A-Z]+$`, asOf, path)
		require.True(t, json.Valid(body), path)
		code, again, asOf, body := fetch(t, srv.URL+path, tag)
		require.Equal(t, http.StatusNotModified, code, path)
		require.Equal(t, tag, again, path)
		require.NotEmpty(t, asOf, path)
		require.Empty(t, body, path)
	}

	// The row of one series, as a page showing it refreshes it.
	var one struct{ Series []struct{ Name string } }
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/series?series=orders&interval=PT1H", &one))
	require.Len(t, one.Series, 1)
	require.Equal(t, "orders", one.Series[0].Name)
	var e struct{ Error string }
	require.Equal(t, http.StatusNotFound, getJSON(t, srv.URL+"/api/series?series=orders&interval=PT5M", &e))

	path := "/api/heatmap?series=orders&interval=PT1H"
	_, tag, _, _ := fetch(t, srv.URL+path, "")
	_, err := f.client.Reopen(context.Background(), f.series, f.at(28, 6), f.at(28, 12), almanac.WriteOptions{Reason: "late orders"})
	require.NoError(t, err)
	code, changed, _, body := fetch(t, srv.URL+path, tag)
	require.Equal(t, http.StatusOK, code)
	require.NotEqual(t, tag, changed)
	var h struct{ Total struct{ Open int } }
	require.NoError(t, json.Unmarshal(body, &h))
	require.Equal(t, seedOpen+6, h.Total.Open)
}

// overdueView is what api/failures says of overdue slots.
type overdueView struct {
	Failures []struct {
		Slot    string
		Overdue bool
	}
	Overdue  int
	Stalled  bool
	LastSeen string
}

// TestAPIOverdue checks how the page tells a failed slot whose next try
// passed (overdue) and workers that seem to have stopped (stalled: no
// completion and no failure since the overdue slots fell due).
func TestAPIOverdue(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{CacheTTL: -1})
	get := func() overdueView {
		var v overdueView
		require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/failures?series=orders&interval=PT1H", &v))
		return v
	}
	overdue := func(v overdueView) []string {
		var out []string
		for _, x := range v.Failures {
			if x.Overdue {
				out = append(out, x.Slot)
			}
		}
		return out
	}
	v := get()
	require.Zero(t, v.Overdue, "both failures wait an hour for their next try")
	require.Empty(t, overdue(v))

	// The next try of 06:00 on the 30th passed ten minutes ago; workers
	// failed slots and completed others just now.
	f.exec(`UPDATE {{schema}}.slot SET not_before = now() - interval '10 minutes' WHERE slot_start = $1`, f.at(30, 6))
	v = get()
	require.Equal(t, 1, v.Overdue)
	require.Equal(t, []string{slot.FormatTime(f.at(30, 6))}, overdue(v))
	require.False(t, v.Stalled, "workers were seen after it fell due")

	// Every trace of a worker is an hour old: they stopped.
	f.exec(`UPDATE {{schema}}.slot SET updated_at = now() - interval '1 hour' WHERE fail_count > 0`)
	f.exec(`UPDATE {{schema}}.slot SET completed_at = now() - interval '1 hour' WHERE status = 'COMPLETE'`)
	v = get()
	require.Equal(t, 1, v.Overdue)
	require.True(t, v.Stalled)
	require.NotEmpty(t, v.LastSeen)

	// A failure without backoff is due when it is recorded: the failure
	// is no sign of a worker after that.
	f.exec(`UPDATE {{schema}}.slot SET not_before = now() + interval '1 hour' WHERE slot_start = $1`, f.at(30, 6))
	f.exec(`UPDATE {{schema}}.slot SET not_before = NULL WHERE slot_start = $1`, f.at(30, 7))
	f.exec(`UPDATE {{schema}}.slot SET updated_at = now() - interval '30 minutes' WHERE fail_count > 0`)
	v = get()
	require.Equal(t, []string{slot.FormatTime(f.at(30, 7))}, overdue(v))
	require.True(t, v.Stalled)

	// A worker completes a slot: seen again.
	f.exec(`UPDATE {{schema}}.slot SET completed_at = now() WHERE slot_start = $1`, f.at(31, 23))
	v = get()
	require.Equal(t, 1, v.Overdue)
	require.False(t, v.Stalled)
}
