package web_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	res, err := http.Get(u)
	require.NoError(t, err)
	defer res.Body.Close()
	require.NoError(t, json.NewDecoder(res.Body).Decode(v))
	return res.StatusCode
}

// TestAPI checks the JSON the page draws from against the seeded states.
func TestAPI(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{})
	var h struct {
		Unit  string
		Total map[string]int64
		Rows  []struct {
			Label string
			Cells []struct{ State string }
		}
	}
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/heatmap?series=orders&interval=PT1H", &h))
	require.Equal(t, "slot", h.Unit)
	require.Equal(t, map[string]int64{"slots": seedSlots, "complete": seedComplete, "skipped": seedSkipped, "open": seedOpen,
		"inFlight": seedInFlight, "failed": seedFailed, "parked": seedParked, "missing": seedMissing, "notDue": 0}, h.Total)
	require.Len(t, h.Rows, 7)
	require.Equal(t, "Sun 2026-03-29 (23 h)", h.Rows[3].Label)
	require.Len(t, h.Rows[3].Cells, 23)

	var fs struct {
		Failures []struct{ Slot, State, Message string }
	}
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/failures?series=orders&interval=PT1H", &fs))
	require.Len(t, fs.Failures, 3)

	var e struct{ Error string }
	require.Equal(t, 400, getJSON(t, srv.URL+"/api/heatmap?series=orders&interval=PT1H&from=yesterday", &e))
	require.Contains(t, e.Error, "yesterday")
	require.Equal(t, 404, getJSON(t, srv.URL+"/api/heatmap?series=nope&interval=PT1H", &e))
	require.Equal(t, 400, getJSON(t, srv.URL+"/api/heatmap?series=orders", &e))

	// Read-only: no action, whatever the credentials.
	res, err := http.PostForm(srv.URL+"/api/action", url.Values{"action": {"reopen"}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	// Compacted slots count as they were, in the calendar and the series
	// table, and a compacted slot's history says so.
	_, err = f.client.Compact(context.Background(), f.day(29), almanac.WriteOptions{})
	require.NoError(t, err)
	srv = f.serve(t, web.Options{CacheTTL: -1}) // not the counts cached before
	var after struct{ Total map[string]int64 }
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/heatmap?series=orders&interval=PT1H", &after))
	require.Equal(t, h.Total, after.Total)
	var ss struct {
		Series []struct {
			Complete, Missing int64
		}
		ServerVersion string
	}
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/series", &ss))
	require.Len(t, ss.Series, 1)
	require.Equal(t, []int64{seedComplete, seedMissing}, []int64{ss.Series[0].Complete, ss.Series[0].Missing})
	server, err := f.client.ServerVersion(context.Background())
	require.NoError(t, err)
	require.Regexp(t, `^\d+\.\d+`, server)
	require.Equal(t, server, ss.ServerVersion)
	res, err = http.Get(srv.URL + "/")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Contains(t, html.UnescapeString(string(page)), "Server: PostgreSQL "+server+"<", "the page shows the server's version")
	var hs struct {
		Current   any
		Compacted struct{ State string }
	}
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/history?series=orders&interval=PT1H&slot="+url.QueryEscape(slot.FormatTime(f.at(28, 3))), &hs))
	require.Nil(t, hs.Current)
	require.Equal(t, "complete", hs.Compacted.State)
}

// TestActionsNeedTokenAndCSRF checks the guards of actions: the bearer
// token, the session's CSRF token, the Origin, and the reason.
func TestActionsNeedTokenAndCSRF(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{AllowActions: true, Token: testToken})
	form := url.Values{"action": {"skip"}, "series": {"orders"}, "interval": {"PT1H"},
		"from": {slot.FormatTime(f.day(32))}, "to": {slot.FormatTime(f.at(32, 2))}, "reason": {"no orders on April 1"}}
	post := func(form url.Values, headers map[string]string) (int, string) {
		req, err := http.NewRequest("POST", srv.URL+"/api/action", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, _ := post(form, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(form, map[string]string{"Authorization": "Bearer wrong-token-wrong-token"})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(form, map[string]string{"Authorization": "Bearer " + testToken, "Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, code)
	bad := url.Values{}
	for k, v := range form {
		bad[k] = v
	}
	bad.Set("reason", "")
	code, body := post(bad, map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "reason")
	bad.Set("reason", "bad\x00reason")
	code, _ = post(bad, map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusBadRequest, code)
	code, body = post(form, map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "skipped 2 slots")

	// A session cookie alone is not enough: the CSRF token and the Origin
	// must come with it.
	jar := &cookieJar{}
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(token, origin string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		res, err := client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusForbidden, login(testToken, "https://evil.example"))
	require.Equal(t, http.StatusUnauthorized, login("nope", srv.URL))
	require.Equal(t, http.StatusSeeOther, login(testToken, srv.URL))
	require.NotEmpty(t, jar.cookie)
	require.Equal(t, http.SameSiteStrictMode, jar.last.SameSite)
	require.True(t, jar.last.HttpOnly)
	cookie := map[string]string{"Cookie": jar.cookie, "Origin": srv.URL}
	code, _ = post(form, cookie)
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")
	cookie["X-CSRF-Token"] = "guess"
	code, _ = post(form, cookie)
	require.Equal(t, http.StatusForbidden, code, "wrong CSRF token")
}

// cookieJar keeps the session cookie of one server.
type cookieJar struct {
	cookie string
	last   *http.Cookie
}

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	for _, c := range cs {
		j.cookie, j.last = c.Name+"="+c.Value, c
	}
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie { return nil }

// TestUnusableSeriesRow: rows plain SQL stored with a name, interval or
// zone almanac refuses are flagged, and every other series is still shown
// by /api/series and the page. Before, both failed for every series.
func TestUnusableSeriesRow(t *testing.T) {
	f := seed(t)
	f.exec(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin) VALUES
		('bad` + "\x1b" + `[2J', 'PT1H', 'UTC', '2000-01-01T00:00:00Z'),
		('zero', 'P0D', 'UTC', '2000-01-01T00:00:00Z'),
		('mars', 'PT1H', 'Mars/Olympus', '2000-01-01T00:00:00Z')`)
	srv := f.serve(t, web.Options{CacheTTL: -1})
	var ss struct {
		Series   []struct{ Name string }
		Unusable []string
	}
	require.Equal(t, 200, getJSON(t, srv.URL+"/api/series", &ss))
	require.Len(t, ss.Series, 1)
	require.Equal(t, "orders", ss.Series[0].Name)
	require.Len(t, ss.Unusable, 3)
	require.Contains(t, strings.Join(ss.Unusable, "\n"), "Mars/Olympus")
	res, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode)
	text := html.UnescapeString(string(page))
	require.Contains(t, text, "orders")
	require.Contains(t, text, `stored series "zero" "P0D" is unusable`)
	require.NotContains(t, text, "\x1b", "no raw control character reaches the page")
}
