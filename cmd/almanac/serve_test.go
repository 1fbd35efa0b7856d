package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestServeRefusesBadInput: a bad address, host, token or identity setup
// exits 2 before the database is tried, never showing a token; an
// unreachable database exits 3.
func TestServeRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	const good = "0f3c9a7e21b84d56c0e9f7a3b2d14c68e5a9f0b3c7d2e1a4"
	short := file("short", "abc\n")
	weak := file("weak", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n")
	shared := file("shared", good+"\n")
	unreachable := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT": "200ms"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--http", "localhost"}, "expected HOST:PORT"},
		{[]string{"serve", "--http", "127.0.0.1:99999"}, "expected HOST:PORT"},
		{[]string{"serve", "--nope"}, "unknown flag"},
		{[]string{"serve", "--allow-host", "evil.example/path"}, "--allow-host"},
		{[]string{"serve", "--allow-host", ""}, "--allow-host"},
		{[]string{"serve", "--allow-actions"}, "openssl rand -hex 32"},
		{[]string{"serve", "--allow-actions", "--token-file", filepath.Join(dir, "missing")}, "--token-file"},
		{[]string{"serve", "--allow-actions", "--token-file", short}, "looks guessable"},
		{[]string{"serve", "--allow-actions", "--token-file", weak}, "expected at least 128 bits from a random generator, e.g. openssl rand -hex 32"},
		{[]string{"serve", "--token-file", short}, "only used with --allow-actions"},
		{[]string{"serve", "--users-file", short}, "only used with --allow-actions"},
		{[]string{"serve", "--user-header", "X-Forwarded-User"}, "only used with --allow-actions"},
		{[]string{"serve", "--allow-actions", "--user-header", "X Forwarded User"}, "expected an HTTP header name"},
		{[]string{"serve", "--allow-actions", "--users-file", filepath.Join(dir, "missing")}, "--users-file"},
		{[]string{"serve", "--allow-actions", "--users-file", file("empty", "# nobody yet\n\n")}, "names nobody"},
		{[]string{"serve", "--allow-actions", "--users-file", file("one-word", good+"\n")}, "line 1: expected a name, then a token"},
		{[]string{"serve", "--allow-actions", "--users-file", file("weak-user", "alice abcabcabcabcabcabcabcabcabcabcabcabcabc\n")}, "line 1 looks guessable"},
		{[]string{"serve", "--allow-actions", "--users-file", file("bad-name", "ali\x1bce "+good+"\n")}, "line 1: invalid text: actor"},
		{[]string{"serve", "--allow-actions", "--users-file", file("twice", "alice "+good+"\n# bob\nbob "+good+"\n")}, "line 3: the token is line 1's too"},
		{[]string{"serve", "--allow-actions", "--token-file", shared, "--users-file", file("shared-user", "alice "+good+"\n")}, "the token is the shared one"},
	} {
		r := cliEnv(t, unreachable, c.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, "%v", c.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
		for _, secret := range []string{"abc", "aaaa", good} {
			require.NotContains(t, r.stderr, secret, "a token is never shown")
		}
	}
	r := cliEnv(t, unreachable, "serve", "--http", "127.0.0.1:0")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
	require.Contains(t, r.stderr, "cannot reach the database")
	// A token from the documented generator, shared or per person, is fine.
	r = cliEnv(t, unreachable, "serve", "--http", "127.0.0.1:0", "--allow-actions", "--token-file", shared,
		"--users-file", file("users", "# people\nAlice Example "+strings.Repeat("7e", 16)+"c1d2e3f4a5b60718293a4b5c6d7e8f90\n"))
	require.Equal(t, exitUnavailable, r.code, r.stderr)
}

// TestServe starts the page on a free port, reads it, acts through it as a
// person of --users-file, answers only its own hosts, and stops on
// cancellation with exit 0.
func TestServe(t *testing.T) {
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "orders", "--interval", "PT1H", "--tz", "Europe/Berlin"))
	requireOK(t, cli(t, "--schema", schema, "materialize", "orders", "--interval", "PT1H", "--from", "2026-03-01T00:00:00+01:00", "--to", "2026-03-01T02:00:00+01:00"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, w := io.Pipe()
	code := make(chan int, 1)
	const aliceToken = "5d0b7f3e9a1c6e2f8b4d0a7c3e9f1b5d7a2c8e4f0b6d3a9c"
	users := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(users, []byte("alice@example "+aliceToken+"\n"), 0o600))
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "ALMANAC_TOKEN": "e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8"}
	go func() {
		code <- run(ctx, []string{"--schema", schema, "serve", "--http", "127.0.0.1:0", "--allow-actions", "--users-file", users,
			"--allow-host", "almanac.example.com"}, io.Discard, w, func(k string) string { return env[k] })
		w.Close()
	}()
	lines := bufio.NewScanner(stderr)
	require.True(t, lines.Scan(), "no line on stderr")
	addr := regexp.MustCompile(`serving the coverage page on (http://127\.0\.0\.1:\d+/) \(actions allowed with the token, 1 person's token\)`).FindStringSubmatch(lines.Text())
	require.NotNil(t, addr, lines.Text())
	go func() { _, _ = io.Copy(io.Discard, stderr) }()

	res, err := http.Get(addr[1])
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "orders")
	require.Contains(t, string(body), "Log in to act")
	require.False(t, strings.Contains(string(body), env["ALMANAC_TOKEN"]))

	// The operational endpoints are mounted beside the page.
	status, metrics := get(t, addr[1]+"metrics")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 2, metricSum(t, metrics, "almanac_slots_open", "orders"))
	status, _ = get(t, addr[1]+"readyz")
	require.Equal(t, http.StatusOK, status)
	status, _ = get(t, addr[1]+"healthz")
	require.Equal(t, http.StatusOK, status)

	// Only its own hosts, page and metrics alike.
	withHost := func(path, host string) int {
		req, err := http.NewRequest("GET", addr[1]+path, nil)
		require.NoError(t, err)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"", "api/series", "metrics", "readyz"} {
		require.Equal(t, http.StatusMisdirectedRequest, withHost(path, "evil.example"), path)
		require.Equal(t, http.StatusOK, withHost(path, "almanac.example.com"), path)
		require.Equal(t, http.StatusOK, withHost(path, "localhost"), path)
	}

	// Alice skips a slot; the history names her.
	form := url.Values{"action": {"skip"}, "series": {"orders"}, "interval": {"PT1H"}, "reason": {"no orders"},
		"from": {"2026-03-01T00:00:00+01:00"}, "to": {"2026-03-01T01:00:00+01:00"}}
	req, err := http.NewRequest("POST", addr[1]+"api/action", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	h := decode[historyResult](t, cli(t, "--schema", schema, "--json", "history", "orders", "2026-03-01T00:00:00+01:00/PT1H"))
	require.Len(t, h.Events, 1)
	require.Equal(t, "alice@example", h.Events[0].Actor)
	require.Equal(t, "no orders", h.Events[0].Message)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, exitOK, c)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on cancellation")
	}
}

// TestHTTPLimits: a client that sends a request's body slowly is cut off
// after the read timeout, and no more than the cap of connections is
// served at once; the next is served when one closes.
func TestHTTPLimits(t *testing.T) {
	limits := httpLimits{readHeader: time.Second, read: 2 * time.Second, write: 10 * time.Second, idle: 10 * time.Second, conns: 2}
	release := make(chan struct{})
	var inside atomic.Int64
	srv := limits.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		if r.URL.Path == "/hold" {
			<-release
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(limits.listener(ln)) }()
	t.Cleanup(func() { srv.Close() })
	// send opens a connection, writes text and returns what the server
	// answers until it closes the connection (or 30 s pass).
	send := func(text string) <-chan error {
		done := make(chan error, 1)
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		go func() {
			if _, err := io.WriteString(c, text); err != nil {
				done <- err
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.ReadAll(c)
			done <- err
		}()
		return done
	}

	// A body that never comes: the connection is closed at the read
	// timeout, not held.
	slow := send("POST /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\nthe first bytes")
	require.NoError(t, <-slow, "the server held the connection of a slow body")

	// Two connections held: a third waits to be accepted until one closes.
	inside.Store(0)
	held := []<-chan error{
		send("GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
		send("GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
	}
	require.Eventually(t, func() bool { return inside.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
	third := send("GET /now HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	require.Never(t, func() bool { return inside.Load() > 2 }, 300*time.Millisecond, 10*time.Millisecond)
	close(release)
	for _, h := range held {
		require.NoError(t, <-h)
	}
	require.NoError(t, <-third)
	require.EqualValues(t, 3, inside.Load())
}
