package web_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
	"github.com/almanacdev/almanac/web"
)

// request sends method to srv's path with headers (a "Host" entry sets the
// Host header) and form, and returns the status and body.
func request(t *testing.T, srv *httptest.Server, method, path string, headers map[string]string, form url.Values) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, srv.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(b)
}

// TestOnlyItsOwnHosts: the page answers requests sent to loopback names
// and addresses and to the hosts it is told of, and nothing else: a page
// of another site whose name points here (DNS rebinding) reads no series,
// failures or history.
func TestOnlyItsOwnHosts(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{})
	port := srv.Listener.Addr().String()
	port = port[strings.LastIndex(port, ":"):]
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "LocalHost", "app.localhost" + port, "[::1]" + port, "127.0.0.2"} {
		code, _, body := request(t, srv, "GET", "/api/series", map[string]string{"Host": host}, nil)
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
	}
	for _, path := range []string{"/", "/api/series", "/api/failures?series=orders&interval=PT1H", "/login", "/assets/app.js"} {
		for _, host := range []string{"evil.example" + port, "evil.example", "127.0.0.1.evil.example", "localhost.evil.example", "192.0.2.1"} {
			code, _, body := request(t, srv, "GET", path, map[string]string{"Host": host}, nil)
			require.Equal(t, http.StatusMisdirectedRequest, code, "%s %s", host, path)
			require.NotContains(t, body, "orders", "%s %s", host, path)
			require.Contains(t, body, "--allow-host")
		}
	}

	srv = f.serve(t, web.Options{Hosts: []string{"Almanac.Example.com", "192.0.2.1"}})
	for _, host := range []string{"almanac.example.com", "ALMANAC.EXAMPLE.COM.:8080", "192.0.2.1:80", "localhost"} {
		code, _, body := request(t, srv, "GET", "/api/series", map[string]string{"Host": host}, nil)
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
	}
	code, _, _ := request(t, srv, "GET", "/api/series", map[string]string{"Host": "evil.example"}, nil)
	require.Equal(t, http.StatusMisdirectedRequest, code)

	srv = f.serve(t, web.Options{Hosts: []string{"*"}})
	code, _, _ = request(t, srv, "GET", "/api/series", map[string]string{"Host": "anything.example"}, nil)
	require.Equal(t, http.StatusOK, code)
}

// TestTokenGuessesAreLimited: wrong tokens, in the login form or as a
// bearer, get 429 with the wait once a client has made its share of
// tries, and then so does the right one, until the wait is over; a right
// token does not count.
func TestTokenGuessesAreLimited(t *testing.T) {
	f := seed(t)
	srv := f.serve(t, web.Options{AllowActions: true, Token: testToken})
	login := func(token string) (int, http.Header, string) {
		return request(t, srv, "POST", "/login", map[string]string{"Origin": srv.URL}, url.Values{"token": {token}})
	}
	// A right token, many times over: never limited.
	for range 30 {
		code, _, _ := login(testToken)
		require.Equal(t, http.StatusSeeOther, code)
	}
	// Wrong ones: refused, then limited. Tries come back at one per few
	// seconds, so 200 tries cannot all be allowed however slow the machine.
	limited := false
	for i := 0; i < 200 && !limited; i++ {
		code, header, body := login(fmt.Sprintf("guess-%d", i))
		if code == http.StatusTooManyRequests {
			limited = true
			wait, err := strconv.Atoi(header.Get("Retry-After"))
			require.NoError(t, err)
			require.Positive(t, wait)
			require.Regexp(t, `Too many wrong tokens from your address; try again in \d+ s\.`, body)
			continue
		}
		require.Equal(t, http.StatusUnauthorized, code, body)
	}
	require.True(t, limited, "200 wrong tokens and none refused for the rate")
	code, _, _ := login(testToken)
	require.Equal(t, http.StatusTooManyRequests, code, "no oracle while limited")
	code, _, body := request(t, srv, "POST", "/api/action", map[string]string{"Authorization": "Bearer " + testToken}, url.Values{"action": {"retry"}})
	require.Equal(t, http.StatusTooManyRequests, code, body)
	require.Contains(t, body, "Too many wrong tokens")
}

// TestActionsRecordWhoActs: a person's token, as a bearer or through a
// login, and a person named by an authenticating proxy act under their
// own name in the slots' history; the shared token acts as the client's
// actor; the proxy's header counts only when configured, and only with
// the page's CSRF token and origin.
func TestActionsRecordWhoActs(t *testing.T) {
	f := seed(t)
	const aliceToken = "3f9c1e0a7d5b2c8e4f6a1d3b5c7e9f0a2b4d6c8e0f1a3b5c"
	srv := f.serve(t, web.Options{AllowActions: true, Token: testToken, Users: map[string]string{aliceToken: "alice@example"},
		UserHeader: "X-Forwarded-User"})
	act := func(action string, day int, headers map[string]string) (int, string) {
		form := url.Values{"action": {action}, "series": {"orders"}, "interval": {"PT1H"}, "reason": {"checked by hand"},
			"from": {slot.FormatTime(f.at(day, 4))}, "to": {slot.FormatTime(f.at(day, 5))}}
		code, _, body := request(t, srv, "POST", "/api/action", headers, form)
		return code, body
	}
	lastBy := func(day int) string {
		h, err := f.client.History(context.Background(), f.series, f.at(day, 4))
		require.NoError(t, err)
		require.NotEmpty(t, h.Events)
		e := h.Events[len(h.Events)-1]
		return e.Event + " by " + e.Actor
	}

	code, body := act("skip", 32, map[string]string{"Authorization": "Bearer " + aliceToken})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "skipped by alice@example", lastBy(32))
	code, body = act("reopen", 32, map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "reopened by ops@example", lastBy(32), "the shared token acts as the client's actor")

	// Alice logs in: the page names her, and her session acts as her.
	jar := &cookieJar{}
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(url.Values{"token": {aliceToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	res, err := client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	code, _, page := request(t, srv, "GET", "/", map[string]string{"Cookie": jar.cookie}, nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "Actions enabled · alice@example")
	csrf := regexp.MustCompile(`data-csrf="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, csrf)
	code, body = act("reopen", 31, map[string]string{"Cookie": jar.cookie, "Origin": srv.URL, "X-CSRF-Token": csrf[1]})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "reopened by alice@example", lastBy(31))

	// Bob comes through the proxy: the page gives him a CSRF token; without
	// it, or from another origin, he cannot act.
	bob := map[string]string{"X-Forwarded-User": "bob@example"}
	code, _, page = request(t, srv, "GET", "/", bob, nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "Actions enabled · bob@example")
	require.NotContains(t, page, "Log out", "the proxy logs people out")
	csrf = regexp.MustCompile(`data-csrf="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, csrf)
	code, _ = act("skip", 30, map[string]string{"X-Forwarded-User": "bob@example", "Origin": srv.URL})
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")
	code, _ = act("skip", 30, map[string]string{"X-Forwarded-User": "mallory@example", "Origin": srv.URL, "X-CSRF-Token": csrf[1]})
	require.Equal(t, http.StatusForbidden, code, "another person's CSRF token")
	code, _ = act("skip", 30, map[string]string{"X-Forwarded-User": "bob@example", "Origin": "https://evil.example", "X-CSRF-Token": csrf[1]})
	require.Equal(t, http.StatusForbidden, code, "another origin")
	code, body = act("skip", 30, map[string]string{"X-Forwarded-User": "\u202ebob", "Origin": srv.URL, "X-CSRF-Token": csrf[1]})
	require.Equal(t, http.StatusForbidden, code, "a name that cannot be recorded")
	require.Contains(t, body, "cannot be recorded")
	code, body = act("reopen", 30, map[string]string{"X-Forwarded-User": "bob@example", "Origin": srv.URL, "X-CSRF-Token": csrf[1]})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "reopened by bob@example", lastBy(30))

	// Without UserHeader, the header is nobody.
	srv = f.serve(t, web.Options{AllowActions: true, Token: testToken})
	code, _ = act("skip", 29, map[string]string{"X-Forwarded-User": "bob@example", "Origin": srv.URL, "X-CSRF-Token": csrf[1]})
	require.Equal(t, http.StatusUnauthorized, code)
}

// TestActionLogHidesPasswords: a reason quoting a connection URL with its
// password reaches the action's log line without the password.
func TestActionLogHidesPasswords(t *testing.T) {
	f := seed(t)
	var logs bytes.Buffer
	srv := f.serve(t, web.Options{AllowActions: true, Token: testToken, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	reason := "retry after fixing postgres://report:hunter2secret@db.internal/orders"
	form := url.Values{"action": {"retry"}, "series": {"orders"}, "interval": {"PT1H"}, "reason": {reason},
		"from": {slot.FormatTime(f.day(29))}, "to": {slot.FormatTime(f.day(31))}}
	code, _, body := request(t, srv, "POST", "/api/action", map[string]string{"Authorization": "Bearer " + testToken}, form)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, logs.String(), "almanac web: action")
	require.Contains(t, logs.String(), "db.internal")
	require.NotContains(t, logs.String(), "hunter2secret")
}

// TestHeatmapsDoNotStarveTheRest: calendar requests for thirty different
// ranges, all stuck in the database, take at most Options.MaxHeatmaps
// connections of a pool of four; the series table and the failures list
// are answered meanwhile, and the calendars once the database moves again.
func TestHeatmapsDoNotStarveTheRest(t *testing.T) {
	f := seed(t)
	ctx := context.Background()
	pool, err := almanac.NewPool(ctx, f.db.URL, almanac.PoolOptions{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pageClient, err := almanac.New(pool, almanac.Options{Schema: f.db.Schema})
	require.NoError(t, err)
	page := web.Handler(pageClient, web.Options{CacheTTL: time.Hour})
	var entered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/heatmap" {
			entered.Add(1)
		}
		page.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// Bounded, so that a request stuck behind the calendars fails the test
	// rather than hanging it.
	client := &http.Client{Timeout: 30 * time.Second}
	get := func(path string) (int, string, error) {
		res, err := client.Get(srv.URL + path)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	code, body, err := get("/api/series") // the series table's calendar, now cached
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)

	// A calendar reads the series' stored ranges; the series table's
	// counts (cached), its extent and the failures do not. Hold that
	// table, and every new calendar waits in the database.
	lock, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // released below
	_, err = lock.Exec(ctx, sqlschema.Render(`LOCK TABLE {{schema}}.slot_stored IN ACCESS EXCLUSIVE MODE`, f.db.Schema))
	require.NoError(t, err)
	waiting := func() int {
		var n int
		require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted`,
			sqlschema.Quote(f.db.Schema)+".slot_stored").Scan(&n))
		return n
	}

	const calendars = 30
	var wg sync.WaitGroup
	codes := make([]int, calendars)
	errs := make([]error, calendars)
	for i := range calendars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := url.QueryEscape(slot.FormatTime(f.day(26).Add(time.Duration(i) * time.Hour)))
			codes[i], _, errs[i] = get("/api/heatmap?series=orders&interval=PT1H&from=" + from)
		}()
	}
	require.Eventually(t, func() bool { return entered.Load() == calendars && waiting() > 0 }, time.Minute, 10*time.Millisecond)

	for _, path := range []string{"/api/series", "/api/failures?series=orders&interval=PT1H"} {
		code, body, err = get(path)
		require.NoError(t, err, "%s waited behind the calendars", path)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	}
	require.LessOrEqual(t, waiting(), 2, "calendars computed at once (Options.MaxHeatmaps' default)")

	require.NoError(t, lock.Rollback(ctx))
	wg.Wait()
	for i, c := range codes {
		require.NoError(t, errs[i])
		require.Equal(t, http.StatusOK, c, "calendar %d", i)
	}
}
