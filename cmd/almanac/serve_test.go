package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestServeRefusesBadInput: a bad address or token setup exits 2 before
// the database is tried; an unreachable database exits 3.
func TestServeRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("abc\n"), 0o600))
	unreachable := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT": "200ms"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--http", "localhost"}, "expected HOST:PORT"},
		{[]string{"serve", "--http", "127.0.0.1:99999"}, "expected HOST:PORT"},
		{[]string{"serve", "--nope"}, "unknown flag"},
		{[]string{"serve", "--allow-actions"}, "needs a token"},
		{[]string{"serve", "--allow-actions", "--token-file", filepath.Join(dir, "missing")}, "--token-file"},
		{[]string{"serve", "--allow-actions", "--token-file", short}, "too short"},
		{[]string{"serve", "--token-file", short}, "only used with --allow-actions"},
	} {
		r := cliEnv(t, unreachable, c.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, "%v", c.args)
		require.NotContains(t, r.stderr, "abc", "the token is never shown")
	}
	r := cliEnv(t, unreachable, "serve", "--http", "127.0.0.1:0")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
	require.Contains(t, r.stderr, "cannot reach the database")
}

// TestServe starts the page on a free port, reads it, and stops on
// cancellation with exit 0.
func TestServe(t *testing.T) {
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "orders", "--interval", "PT1H", "--tz", "Europe/Berlin"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, w := io.Pipe()
	code := make(chan int, 1)
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "ALMANAC_TOKEN": "a-token-long-enough-1234"}
	go func() {
		code <- run(ctx, []string{"--schema", schema, "serve", "--http", "127.0.0.1:0", "--allow-actions"}, io.Discard, w,
			func(k string) string { return env[k] })
		w.Close()
	}()
	lines := bufio.NewScanner(stderr)
	require.True(t, lines.Scan(), "no line on stderr")
	addr := regexp.MustCompile(`serving the coverage page on (http://127\.0\.0\.1:\d+/) \(actions allowed`).FindStringSubmatch(lines.Text())
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
	require.EqualValues(t, 0, metricSum(t, metrics, "almanac_slots_open", "orders"))
	status, _ = get(t, addr[1]+"readyz")
	require.Equal(t, http.StatusOK, status)
	status, _ = get(t, addr[1]+"healthz")
	require.Equal(t, http.StatusOK, status)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, exitOK, c)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on cancellation")
	}
}
