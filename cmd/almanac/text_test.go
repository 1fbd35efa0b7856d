package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/dbtarget"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestNumbersOneWay: every count a person reads has thousands separators
// and agrees with its noun.
func TestNumbersOneWay(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 2016: "2,016", 23052: "23,052", 1234567: "1,234,567", -1234: "-1,234"} {
		require.Equal(t, want, num(n))
	}
	require.Equal(t, "1 slot", nouns(1, "slot", "slots"))
	require.Equal(t, "0 slots", nouns(0, "slot", "slots"))
	require.Equal(t, "23,052 slots", nouns(int64(23052), "slot", "slots"))
	require.Equal(t, "1 failed or parked slot", nouns(1, "failed or parked slot", "failed or parked slots"))
}

// TestDefaultsPrintedOnce: a flag whose help states its default (because
// it depends on a variable) has no default value for cobra to print again.
func TestDefaultsPrintedOnce(t *testing.T) {
	a := &app{getenv: func(string) string { return "" }}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "(default") {
				require.Contains(t, []string{"", "false", "0", "[]"}, f.DefValue, "%s --%s states its default and has %q", c.CommandPath(), f.Name, f.DefValue)
			}
		}
		c.Flags().VisitAll(check)
		c.PersistentFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := a.rootCommand()
	walk(root)
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--help"}, &out, &out, a.getenv))
	require.Contains(t, out.String(), "(default: $ALMANAC_POOLER, else auto)\n")
	require.NotContains(t, out.String(), `(default "auto")`)
}

// TestDidYouMean: a mistyped command or flag draws a suggestion.
func TestDidYouMean(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `almanac: unknown command "stauts" for "almanac"; did you mean "status"? See "almanac --help"` + "\n"},
		{[]string{"series", "ad", "x"}, `almanac: unknown command "ad" for "almanac series"; did you mean "add"? See "almanac series --help"` + "\n"},
		{[]string{"status", "x", "--intervl", "P1D"}, "almanac: unknown flag: --intervl; did you mean --interval?\n"},
		{[]string{"gaps", "x", "--fail-on-gap"}, "almanac: unknown flag: --fail-on-gap; did you mean --fail-on-gaps?\n"},
		{[]string{"status", "x", "--shcema", "s"}, "almanac: unknown flag: --shcema; did you mean --schema?\n"},
		{[]string{"status", "x", "--zzzzzz"}, `almanac: unknown flag: --zzzzzz; see "almanac status --help"` + "\n"},
		{[]string{"frobnicate"}, `almanac: unknown command "frobnicate" for "almanac"; see "almanac --help"` + "\n"},
	} {
		r := cliEnv(t, env, tt.args...)
		require.Equal(t, 2, r.code, "%q: %s", tt.args, r.stderr)
		require.Equal(t, tt.want, r.stderr, "%q", tt.args)
	}
}

// TestJSONOutputs: under --json an error is a JSON object on stderr with
// the exit code; under --log-format json a log record; migrate sql honours
// --json; durations in JSON logs are seconds, named so.
func TestJSONOutputs(t *testing.T) {
	type jsonError struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	unreachable := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none"}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--json", "status", "x", "--interval", "PT5M"}, 3, "almanac: cannot reach the database postgres@127.0.0.1:1/none (from DATABASE_URL): "},
		{[]string{"--json", "status", "x", "--bogus"}, 2, "almanac: unknown flag: --bogus"},
		{[]string{"status", "x", "--interval", "P0D", "--json"}, 2, `almanac: --interval: invalid interval "P0D"`},
	} {
		r := cliEnv(t, unreachable, tt.args...)
		require.Equal(t, tt.code, r.code, r.stderr)
		var got jsonError
		require.NoError(t, json.Unmarshal([]byte(r.stderr), &got), "stderr is JSON: %s", r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		require.Equal(t, tt.code, got.ExitCode)
		require.True(t, strings.HasPrefix(got.Error, tt.want), "%q: %s", tt.args, got.Error)
	}

	r := cliEnv(t, unreachable, "--log-format", "json", "status", "x", "--interval", "PT5M")
	require.Equal(t, 3, r.code, r.stderr)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stderr), &rec), "stderr is a JSON record: %s", r.stderr)
	require.Equal(t, "ERROR", rec["level"])
	require.EqualValues(t, 3, rec["exit_code"])
	require.Contains(t, rec["msg"], "almanac: cannot reach the database")

	r = cliEnv(t, unreachable, "--json", "migrate", "sql")
	requireOK(t, r)
	var sql struct {
		Schema  string `json:"schema"`
		Version int    `json:"version"`
		SQL     string `json:"sql"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sql), r.stdout)
	require.Equal(t, "almanac", sql.Schema)
	require.Contains(t, sql.SQL, "CREATE TABLE")

	var logs bytes.Buffer
	a := &app{stderr: &logs, logs: true, logFormat: "json"}
	a.logger().Info("almanac: sidecar starting", "timeout", time.Hour, "lag", 90*time.Second)
	require.Contains(t, logs.String(), `"timeout_s":3600,"lag_s":90}`)

	jsonOut, jsonLogs := outputFormats([]string{"--json", "run", "x", "--", "cmd", "--log-format", "text"})
	require.True(t, jsonOut)
	require.True(t, jsonLogs, "what follows -- is the command's")
	_, jsonLogs = outputFormats([]string{"--json", "--log-format=text", "serve"})
	require.False(t, jsonLogs)
	_, jsonLogs = outputFormats([]string{"--log-format", "json", "serve"})
	require.True(t, jsonLogs)
}

// TestServeJSONStartLine: with --log-format json the start line of serve is
// a record like every other line.
func TestServeJSONStartLine(t *testing.T) {
	schema := migrated(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, w := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--schema", schema, "--log-format", "json", "serve", "--http", "127.0.0.1:0"}, io.Discard, w,
			func(k string) string { return map[string]string{"DATABASE_URL": pgtest.URL(t)}[k] })
		w.Close()
	}()
	lines := bufio.NewScanner(stderr)
	require.True(t, lines.Scan(), "no line on stderr")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(lines.Bytes(), &rec), "the start line is JSON: %s", lines.Text())
	require.Equal(t, "almanac: serving the coverage page", rec["msg"])
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, rec["url"])
	require.Equal(t, "read-only", rec["mode"])
	require.Equal(t, dbtarget.DescribeURL(pgtest.URL(t)), rec["database"])
	cancel()
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	require.Equal(t, 0, <-code)
}

// TestRetryIsNotSilent: a long-running command that waits for the database
// says so at once, in the log's format, then exits 3 when the budget is
// spent.
func TestRetryIsNotSilent(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none", "ALMANAC_RETRY_TIMEOUT": "300ms"}
	r := cliEnv(t, env, "serve", "--http", "127.0.0.1:0")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, r.stderr)
	require.Contains(t, lines[0], `msg="almanac: the database does not answer; retrying within --retry-timeout before exiting with status 3" database=postgres@127.0.0.1:1/none`)
	require.True(t, strings.HasPrefix(lines[1], "almanac: cannot reach the database postgres@127.0.0.1:1/none (from DATABASE_URL): "), lines[1])

	r = cliEnv(t, env, "--log-format", "json", "serve", "--http", "127.0.0.1:0")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
	for _, line := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "every line is JSON: %s", line)
	}
	require.Contains(t, r.stderr, `"retry_timeout_s":0.3`)
}
