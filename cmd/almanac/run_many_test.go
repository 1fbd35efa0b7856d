//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/telemetry"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/testkit/proc"
)

// ranLines reads the lines a job script appended to path, sorted.
func ranLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(sortedLines(strings.ReplaceAll(string(raw), " ", "|")), "\n"), "\n")
}

// TestRunManySeriesOnce: one `almanac run --once` serves three series given
// by name (positional and --series), then three matched by --like, then all
// of an interval; every command sees its series in ALMANAC_SERIES (and
// ALMANAC_NAME), every slot in range runs once, series outside the
// selection are left alone.
func TestRunManySeriesOnce(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	for _, name := range []string{"tenant_a", "tenant_b", "tenant_c", "tenantx", "other"} {
		requireOK(t, cli(t, "--schema", schema, "series", "add", name, "--interval", "PT1M"))
	}
	requireOK(t, cli(t, "--schema", schema, "series", "add", "tenant_d", "--interval", "PT5M"))
	span := []string{"--interval", "PT1M", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--once", "--workers", "2"}
	for _, tt := range []struct {
		selection []string
		want      []string
	}{
		{[]string{"listed_a", "listed_b", "--series", "listed_c"}, []string{"listed_a", "listed_b", "listed_c"}},
		{[]string{"--like", `tenant\_%`}, []string{"tenant_a", "tenant_b", "tenant_c"}},
		// The others are complete already.
		{[]string{"--all"}, []string{"other", "tenantx"}},
	} {
		out := filepath.Join(t.TempDir(), "ran")
		job := script(t, `echo "$ALMANAC_SERIES $ALMANAC_NAME $ALMANAC_SLOT_START" >> "`+out+`"`)
		args := append(append(append([]string{"--schema", schema, "run"}, tt.selection...), span...), "--", job)
		p := start(t, bin, args...)
		require.Equal(t, 0, p.wait(t, time.Minute), "%q: %s", tt.selection, p.stderr)
		var want []string
		for _, name := range tt.want {
			for _, start := range []string{"2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"} {
				want = append(want, name+"|"+name+"|"+start)
			}
		}
		require.Equal(t, want, ranLines(t, out), "%q", tt.selection)
	}
	require.Equal(t, 16, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	require.Equal(t, 0, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE "interval" = 'PT5M'`), "another interval")
}

// TestRunManySeriesNamed: a sidecar (not --once) serves the three series
// named; each command sees its own in ALMANAC_SERIES.
func TestRunManySeriesNamed(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	out := filepath.Join(t.TempDir(), "ran")
	job := script(t, `echo "$ALMANAC_SERIES $ALMANAC_SLOT_START" >> "`+out+`"`)
	p := start(t, bin, "--schema", schema, "run", "north", "south", "--series", "east", "--interval", "PT1M", "--workers", "2",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--", job)
	waitFor(t, "every slot to complete", time.Minute, func() bool {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) == 6
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	var want []string
	for _, name := range []string{"east", "north", "south"} {
		want = append(want, name+"|2026-01-01T00:00:00Z", name+"|2026-01-01T00:01:00Z")
	}
	require.Equal(t, want, ranLines(t, out))
	require.Contains(t, p.stderr.String(), "selection=\"3 series named\"")
}

// TestRunManyOnceFails: --once over many series exits 1 when a slot of any
// of them failed, saying how many are left, as for one series.
func TestRunManyOnceFails(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	job := script(t, `[ "$ALMANAC_SERIES" != bad ] || exit 1`)
	p := start(t, bin, "--schema", schema, "run", "good", "bad", "fine", "--interval", "PT1M", "--max-attempts", "1",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--once", "--", job)
	require.Equal(t, 1, p.wait(t, time.Minute), "stderr: %s", p.stderr)
	require.Contains(t, p.stderr.String(), "2 slots left unfinished: 2 parked")
	require.Equal(t, 4, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND name <> 'bad'`))
}

// TestRunLikeFollowsTheTable: a running `almanac run --like` serves a
// matching series added after it started (read again every --refresh),
// stops serving one removed from the table (read again on SIGHUP), and a
// change of the set does not interrupt a running command: it completes on
// its first attempt.
func TestRunLikeFollowsTheTable(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	for _, name := range []string{"tenant_a", "tenant_b"} {
		requireOK(t, cli(t, "--schema", schema, "series", "add", name, "--interval", "PT1M"))
	}
	dir := t.TempDir()
	// tenant_a's first slot runs until the test lets it finish.
	job := script(t, `
if [ "$ALMANAC_SERIES $ALMANAC_SLOT_START" = "tenant_a 2026-01-01T00:00:00Z" ]; then
  touch "`+dir+`/long"
  while [ ! -e "`+dir+`/finish" ]; do sleep 0.05; done
fi
echo "$ALMANAC_SERIES $ALMANAC_SLOT_START $ALMANAC_ATTEMPT" >> "`+dir+`/ran"
`)
	p := start(t, bin, "--schema", schema, "run", "--like", `tenant\_%`, "--interval", "PT1M", "--workers", "2", "--refresh", "200ms",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--", job)
	complete := func(name string) int {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND name = $1`, name)
	}
	waitFor(t, "tenant_b's slots", 30*time.Second, func() bool { return complete("tenant_b") == 2 })
	waitFor(t, "tenant_a's long command", 30*time.Second, func() bool { _, err := os.Stat(dir + "/long"); return err == nil })

	requireOK(t, cli(t, "--schema", schema, "series", "add", "tenant_c", "--interval", "PT1M"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "other", "--interval", "PT1M"))
	waitFor(t, "tenant_c, added later, to be served", 30*time.Second, func() bool { return complete("tenant_c") == 2 })

	// Removed from the table: no longer served once read again.
	execSQL(t, schema, `DELETE FROM {{schema}}.series WHERE name = 'tenant_b'`)
	waitFor(t, "the serving line after the refresh", 30*time.Second, func() bool {
		return strings.Contains(p.stderrSoFar(), "removed=tenant_b")
	})
	require.NoError(t, os.WriteFile(dir+"/finish", nil, 0o644))
	waitFor(t, "tenant_a's slots", 30*time.Second, func() bool { return complete("tenant_a") == 2 })

	// SIGHUP reads the table at once (with a refresh too long to matter).
	q := start(t, bin, "--schema", schema, "run", "--like", `tenant\_%`, "--interval", "PT1M", "--refresh", "1h",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--", job)
	waitFor(t, "the second process to serve", 30*time.Second, func() bool { return strings.Contains(q.stderrSoFar(), "serving series") })
	requireOK(t, cli(t, "--schema", schema, "series", "add", "tenant_e", "--interval", "PT1M"))
	require.NoError(t, q.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, "tenant_e, read on SIGHUP", 30*time.Second, func() bool { return complete("tenant_e") == 2 })

	for _, r := range []*process{p, q} {
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, r.wait(t, 30*time.Second), "stderr: %s", r.stderr)
	}
	ran := ranLines(t, dir+"/ran")
	require.Contains(t, ran, "tenant_a|2026-01-01T00:00:00Z|1", "the long command ran across the change, once")
	require.Len(t, ran, 8, "every slot once: %q", ran)
	require.Equal(t, 0, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'other'`), "not matched")
	require.Equal(t, 0, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE attempts > 1`))
}

// TestRunThousandSeries: one process serves 1,000 series (--like over
// series registered by plain SQL) and runs the one due slot of each.
func TestRunThousandSeries(t *testing.T) {
	t.Parallel() // its own schema and processes
	const n = 1000
	bin := buildAlmanac(t)
	schema := migrated(t)
	execSQL(t, schema, fmt.Sprintf(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin)
		SELECT 'load_' || lpad(i::text, 4, '0'), 'PT1M', 'UTC', '2000-01-01T00:00:00Z' FROM generate_series(1, %d) i`, n))
	began := time.Now()
	p := start(t, bin, "--schema", schema, "run", "--like", `load\_%`, "--interval", "PT1M", "--workers", "8",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--", "true")
	waitFor(t, "a slot of every series to complete", 3*time.Minute, func() bool {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) == n
	})
	t.Logf("%d series: every slot complete %s after the start", n, time.Since(began).Round(time.Millisecond))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, time.Minute), "stderr: %.3000s", p.stderr)
	require.Equal(t, n, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot`))
	require.Contains(t, p.stderr.String(), fmt.Sprintf("series_count=%d", n))
}

// TestRunJSONEveryLine: with --log-format json every line almanac run
// writes, on stdout and stderr, is a JSON object: the command's output
// (with the slot as attributes, passwords redacted), the events, the
// signal notice and the final error; durations are seconds.
func TestRunJSONEveryLine(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	job := script(t, `
echo "report for $ALMANAC_SERIES"
echo "connecting to postgres://app:s3cret@db/prod" >&2
if [ "$ALMANAC_SERIES" = stuck ]; then touch "`+dir+`/stuck"; sleep 60; fi
[ "$ALMANAC_SERIES" != bad ] || exit 1
`)
	parse := func(what, text string) []map[string]any {
		t.Helper()
		var records []map[string]any
		if text == "" {
			return nil
		}
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), "%s: a line that is not JSON: %q", what, line)
			records = append(records, rec)
			require.NotContains(t, line, "s3cret")
		}
		return records
	}
	find := func(records []map[string]any, msg string) map[string]any {
		t.Helper()
		for _, r := range records {
			if strings.HasPrefix(r["msg"].(string), msg) {
				return r
			}
		}
		t.Fatalf("no record %q in %v", msg, records)
		return nil
	}

	// --once with a failure: the final error is a record too.
	p := start(t, bin, "--schema", schema, "--log-format", "json", "run", "good", "bad", "--interval", "PT1M", "--max-attempts", "1",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--once", "--", job)
	require.Equal(t, 1, p.wait(t, time.Minute), "stderr: %s", p.stderr)
	stdout, stderr := parse("stdout", p.stdout.String()), parse("stderr", p.stderr.String())
	out := find(stdout, "report for good")
	require.Equal(t, map[string]any{"series": "good", "interval": "PT1M", "slot": "2026-01-01T00:00:00Z/PT1M",
		"start": "2026-01-01T00:00:00Z", "attempt": 1.0, "stream": "stdout"},
		map[string]any{"series": out["series"], "interval": out["interval"], "slot": out["slot"], "start": out["start"], "attempt": out["attempt"], "stream": out["stream"]})
	require.Equal(t, "stderr", find(stderr, "connecting to postgres://app:REDACTED@db/prod")["stream"])
	started := find(stderr, "almanac: sidecar starting")
	require.Equal(t, 3600.0, started["timeout_s"])
	require.NotContains(t, started, "timeout")
	final := stderr[len(stderr)-1]
	require.Equal(t, "ERROR", final["level"])
	require.Contains(t, final["msg"], "left unfinished")
	require.Equal(t, 1.0, final["exit_code"])

	// A refusal is a record too.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--all", "--tz", "UTC", "--interval", "PT1M", "--", "true"}, "--tz and --origin"},
		{[]string{"x", "--interval", "PT1M"}, "expects NAME, then --"},
	} {
		r := cli(t, append([]string{"--schema", schema, "--log-format", "json", "run"}, tt.args...)...)
		require.Equal(t, 2, r.code, r.stderr)
		refusal := parse("stderr", r.stderr)
		require.Len(t, refusal, 1)
		require.Equal(t, 2.0, refusal[0]["exit_code"])
		require.Contains(t, refusal[0]["msg"], tt.want)
	}

	// A stop: the signal notices are records.
	q := start(t, bin, "--schema", schema, "--log-format", "json", "run", "stuck", "--interval", "PT1M", "--grace", "1s",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--", job)
	waitFor(t, "the command to start", 30*time.Second, func() bool { _, err := os.Stat(dir + "/stuck"); return err == nil })
	require.NoError(t, q.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, q.wait(t, 30*time.Second), "stderr: %s", q.stderr)
	stderr = parse("stderr", q.stderr.String())
	require.Equal(t, "terminated", find(stderr, "almanac: terminated: stopping gracefully")["signal"])
	find(stderr, "almanac: sidecar stopped")
	parse("stdout", q.stdout.String())
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'stuck' AND status = 'AVAILABLE' AND fail_count = 0`),
		"released, not failed")
}

func TestLikeMatcher(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		match   []string
		not     []string
	}{
		{`tenant_%`, []string{"tenant_a", "tenantx", "tenant_"}, []string{"tenant", "Tenant_a", "a_tenant_b"}},
		{`tenant\_%`, []string{"tenant_a", "tenant_"}, []string{"tenantx", "tenant"}},
		{`%`, []string{"", "a", "a\nb"}, nil},
		{`a.b`, []string{"a.b"}, []string{"axb"}},
		{`100\%`, []string{"100%"}, []string{"1000"}},
		{`_`, []string{"é"}, []string{"", "ab"}},
		{`\\%`, []string{`\x`}, []string{"x"}},
	} {
		re, err := likeMatcher(tt.pattern)
		require.NoError(t, err)
		for _, s := range tt.match {
			require.True(t, re.MatchString(s), "%q LIKE %q", s, tt.pattern)
		}
		for _, s := range tt.not {
			require.False(t, re.MatchString(s), "%q NOT LIKE %q", s, tt.pattern)
		}
	}
	_, err := likeMatcher(`tenant\`)
	require.ErrorContains(t, err, `ends with the escape character`)
}

// TestRunLikeHTTP: a --like sidecar that matches nothing yet is alive but
// not ready; once a series matches it is ready, and across a change of the
// set its /metrics count the slots of every series once.
func TestRunLikeHTTP(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	p := start(t, bin, "--schema", schema, "run", "--like", `web\_%`, "--interval", "PT1M", "--refresh", "200ms", "--http", "127.0.0.1:0",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--", "true")
	var base string
	waitFor(t, "the HTTP server", time.Minute, func() bool {
		m := serving.FindStringSubmatch(p.stderrSoFar())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	code, _ := get(t, base+"/healthz")
	require.Equal(t, 200, code)
	code, body := get(t, base+"/readyz")
	require.Equal(t, 503, code, body)
	require.Contains(t, body, `no series to serve (--like web\_%, interval PT1M)`)

	complete := func(name string) int {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND name = $1`, name)
	}
	for _, name := range []string{"web_a", "web_b"} {
		requireOK(t, cli(t, "--schema", schema, "series", "add", name, "--interval", "PT1M"))
		waitFor(t, name+"'s slots", 30*time.Second, func() bool { return complete(name) == 2 })
		code, body = get(t, base+"/readyz")
		require.Equal(t, 200, code, body)
	}
	waitFor(t, "the outcomes to be counted", time.Minute, func() bool {
		_, body = get(t, base+"/metrics")
		return countedTwice("web_a").MatchString(body) && countedTwice("web_b").MatchString(body)
	})
	require.Equal(t, 1, strings.Count(body, `almanac_slots_open{almanac_series="web_b"`), "one gauge per series:\n%s", body)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, time.Minute), "stderr: %s", p.stderr)
}

// countedTwice matches the completed counter of series at 2.
func countedTwice(series string) *regexp.Regexp {
	return regexp.MustCompile(`almanac_slots_completed_total\{[^}]*almanac_series="` + series + `"[^}]*\} 2\n`)
}

// TestWorkerMetersDropTheOpenGauges: a client on workerMeters registers no
// open-slot gauges (the base client has them, once), where a client on the
// provider itself registers them again (TestRunLikeHTTP checks the
// counters still pass).
func TestWorkerMetersDropTheOpenGauges(t *testing.T) {
	t.Parallel() // its own schema
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "gauged", "--interval", "PT1M"))
	names := func(wrapped bool) map[string]bool {
		t.Helper()
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		var mp metric.MeterProvider = provider
		if wrapped {
			mp = workerMeters{provider}
		}
		c, err := almanac.New(pgtest.Pool(t), almanac.Options{Schema: schema, MeterProvider: mp})
		require.NoError(t, err)
		_, err = c.Materialize(context.Background(), mustSeries(t, c, "gauged"), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC), almanac.WriteOptions{})
		require.NoError(t, err)
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		seen := map[string]bool{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				seen[m.Name] = true
			}
		}
		return seen
	}
	direct := names(false)
	require.True(t, direct[telemetry.SlotsOpen], "%v", direct)
	worker := names(true)
	require.False(t, worker[telemetry.SlotsOpen], "%v", worker)
	require.False(t, worker[telemetry.OldestOpenAge], "%v", worker)
}

func mustSeries(t *testing.T, c *almanac.Client, name string) almanac.Series {
	t.Helper()
	info, err := c.LookupSeries(context.Background(), name, "PT1M")
	require.NoError(t, err)
	return info.Series
}

// TestRunLikeStopAfterChange: SIGTERM while a command of a replaced set
// still runs: it gets --grace like any other, then it is stopped and its
// slot released, not failed.
func TestRunLikeStopAfterChange(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "tenant_a", "--interval", "PT1M"))
	dir := t.TempDir()
	job := script(t, `[ "$ALMANAC_SERIES" != tenant_a ] || { echo $$ > "`+dir+`/pid"; sleep 60; }`)
	p := start(t, bin, "--schema", schema, "run", "--like", `tenant\_%`, "--interval", "PT1M", "--refresh", "200ms", "--grace", "1s",
		"--workers", "2", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--", job)
	childPID := readPIDs(t, dir+"/pid")[0]
	requireOK(t, cli(t, "--schema", schema, "series", "add", "tenant_b", "--interval", "PT1M"))
	waitFor(t, "tenant_b to be served", 30*time.Second, func() bool {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND name = 'tenant_b'`) == 1
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	began := time.Now()
	require.Equal(t, 0, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	require.Less(t, time.Since(began), 10*time.Second, "--grace, not the command's --timeout")
	require.NoError(t, proc.WaitExit(childPID, 5*time.Second), "the command is stopped")
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot
		WHERE name = 'tenant_a' AND status = 'AVAILABLE' AND owner IS NULL AND fail_count = 0`), "released, not failed")
}
