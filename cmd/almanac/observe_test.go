package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// get returns the status and body of a GET of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// metricSum adds up the samples of the metric name (all label sets) in a
// Prometheus text exposition, and checks each carries the label of series.
func metricSum(t *testing.T, exposition, name, series string) float64 {
	t.Helper()
	sum, found := 0.0, false
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		require.Contains(t, line, `almanac_series="`+series+`"`, line)
		require.NotContains(t, line, "slot=", "no metric is labelled by slot: %s", line)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
		found = true
	}
	require.True(t, found, "%s is not in the exposition:\n%s", name, exposition)
	return sum
}

// TestOpsEndpoints runs a job through a Client wired as almanac run --http
// wires it, scrapes /metrics and checks the counts against the database,
// and probes /healthz and /readyz, also on a schema that is not migrated.
func TestOpsEndpoints(t *testing.T) {
	ctx := context.Background()
	schema := migrated(t)
	pool := pgtest.Pool(t)
	meters, registry, err := newMetrics()
	require.NoError(t, err)
	c, err := almanac.New(pool, almanac.Options{Schema: schema, MeterProvider: meters})
	require.NoError(t, err)
	srv := httptest.NewServer(opsMux(c, registry, almanac.ReadyOptions{Jobs: true}))
	defer srv.Close()

	code, _ := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "no job registered yet")
	require.Contains(t, body, "no job")

	series, err := c.Series(ctx, "scraped", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, c.Register(almanac.Job{Series: series, From: from, To: from.Add(10 * time.Minute),
		Handler: func(_ context.Context, _ pgx.Tx, s almanac.Slot) error {
			if s.Start.Minute()%3 == 0 {
				return errors.New("boom")
			}
			return nil
		},
		Policy: almanac.Policy{MaxAttempts: 1},
	}))
	code, _ = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, code)
	_, err = c.Drain(ctx)
	require.ErrorIs(t, err, almanac.ErrIncomplete)

	code, body = get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	complete := dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'scraped' AND status = 'COMPLETE'`)
	parked := dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'scraped' AND not_before = 'infinity'`)
	open := dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'scraped' AND status IN ('AVAILABLE', 'ACQUIRED')`)
	require.Equal(t, 6, complete)
	require.Equal(t, 4, parked)
	require.EqualValues(t, complete, metricSum(t, body, "almanac_slots_completed_total", "scraped"))
	require.EqualValues(t, parked, metricSum(t, body, "almanac_slots_parked_total", "scraped"))
	require.EqualValues(t, parked, metricSum(t, body, "almanac_slots_failed_total", "scraped"))
	require.EqualValues(t, open, metricSum(t, body, "almanac_slots_open", "scraped"))
	require.EqualValues(t, complete+parked, metricSum(t, body, "almanac_handler_duration_seconds_count", "scraped"))
	require.Greater(t, metricSum(t, body, "almanac_slots_oldest_open_age_seconds", "scraped"), 0.0)
	// The runtime and the process are there, and the service has its name.
	require.Regexp(t, `(?m)^go_goroutines \d+`, body)
	require.Regexp(t, `(?m)^process_resident_memory_bytes \d`, body)
	require.Regexp(t, `(?m)^target_info\{.*service_name="almanac"`, body)
	require.NotContains(t, body, "unknown_service")

	// A schema that is not migrated is not ready, and says why.
	bare, err := almanac.New(pool, almanac.Options{Schema: freshSchema(t, "cli_bare_")})
	require.NoError(t, err)
	srv2 := httptest.NewServer(opsMux(bare, registry, almanac.ReadyOptions{}))
	defer srv2.Close()
	code, body = get(t, srv2.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "migrate")
	code, _ = get(t, srv2.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
}

// TestFailuresCommand: exit 0 and an empty list without failures; the
// failed and parked slots, with their errors, and exit 1 with them; bad
// input exit 2.
func TestFailuresCommand(t *testing.T) {
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "fails", "--interval", "PT1H"))
	requireOK(t, cli(t, "--schema", schema, "materialize", "fails", "--interval", "PT1H", "--from", "2026-03-01", "--to", "2026-03-02"))
	r := cli(t, "--schema", schema, "failures")
	requireOK(t, r)
	require.Contains(t, r.stdout, "no failed or parked slots")
	r = cli(t, "--schema", schema, "failures", "fails", "--json")
	requireOK(t, r)
	require.JSONEq(t, `{"failures": [], "more": false}`, r.stdout)

	pool := pgtest.Pool(t)
	_, err := pool.Exec(context.Background(), `UPDATE `+schema+`.slot SET fail_count = 3, attempts = 3, message = 'disk full',
		not_before = CASE WHEN slot_start = '2026-03-01T05:00:00Z' THEN 'infinity'::timestamptz ELSE now() + interval '1 hour' END
		WHERE slot_start IN ('2026-03-01T02:00:00Z', '2026-03-01T05:00:00Z')`)
	require.NoError(t, err)

	r = cli(t, "--schema", schema, "failures")
	require.Equal(t, exitProblem, r.code, r.stderr)
	require.Contains(t, r.stdout, "2026-03-01T02:00:00Z/PT1H")
	require.Contains(t, r.stdout, "parked")
	require.Contains(t, r.stdout, "disk full")
	require.Contains(t, r.stderr, "2 failed or parked slots")

	r = cli(t, "--schema", schema, "failures", "fails", "--from", "2026-03-01T03:00", "--json")
	require.Equal(t, exitProblem, r.code, r.stderr)
	var res failuresResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Len(t, res.Failures, 1)
	f := res.Failures[0]
	require.Equal(t, "2026-03-01T05:00:00Z/PT1H", f.Slot)
	require.True(t, f.Parked)
	require.Nil(t, f.RetryAt)
	require.Equal(t, 3, f.FailCount)
	require.Equal(t, "disk full", f.Message)

	r = cli(t, "--schema", schema, "failures", "--limit", "1")
	require.Equal(t, exitProblem, r.code)
	require.Contains(t, r.stderr, "more than 1")

	for _, args := range [][]string{{"failures", "nope"}, {"failures", "--from", "yesterday"},
		{"failures", "--from", "2026-03-02", "--to", "2026-03-01"}, {"failures", "a", "b"}, {"failures", "--limit", "0"}} {
		r = cli(t, append([]string{"--schema", schema}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	}
	r = cliEnv(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"},
		"--retry-timeout", "1s", "failures")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
}

// TestLogFlags: --log-format and --log-level are checked before anything
// connects, and shape almanac run's log.
func TestLogFlags(t *testing.T) {
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "verbose"}, {"--log-level", "info+2"}, {"--log-format", ""}} {
		r := cliEnv(t, nil, append(args, "failures")...)
		if args[1] == "" {
			continue // the default
		}
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	}
	for _, args := range [][]string{{"run", "x", "--interval", "PT5M", "--http", "nohost"}, {"run", "x", "--interval", "PT5M", "--http", "70000"}} {
		r := cliEnv(t, nil, append(args, "--", "true")...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}

	schema := migrated(t)
	r := cli(t, "--schema", schema, "--log-format", "json", "--log-level", "debug", "run", "logged", "--interval", "PT1H",
		"--from", "2026-03-01", "--to", "2026-03-01T02:00", "--once", "--", "true")
	requireOK(t, r)
	var messages []string
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		messages = append(messages, rec["msg"].(string))
	}
	require.Contains(t, messages, "almanac: worker started")
	require.Contains(t, messages, "almanac: claimed")
	require.Contains(t, messages, "almanac: slot completed")

	r = cli(t, "--schema", schema, "--log-level", "warn", "run", "logged", "--interval", "PT1H",
		"--from", "2026-03-01", "--to", "2026-03-01T04:00", "--once", "--", "true")
	requireOK(t, r)
	require.Empty(t, r.stderr, "nothing at warn or above")
}

// TestFailuresAndRetryAgree: failed slots whose backoff ran out are not
// retry's to change (any running worker retries them): failures says no
// worker runs them when they are overdue, retry --dry-run counts what
// retry then changes and says why the others are left alone.
func TestFailuresAndRetryAgree(t *testing.T) {
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "fails", "--interval", "PT1H"))
	day := []string{"--from", "2026-03-01", "--to", "2026-03-02"}
	requireOK(t, cli(t, append([]string{"--schema", schema, "materialize", "fails"}, day...)...))
	pool := pgtest.Pool(t)
	// 02:00 and 03:00 failed and have been due for ten minutes (03:00 since
	// its failure: no backoff); 04:00 is in backoff; 05:00 parked.
	var due time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT date_trunc('second', now()) - interval '10 minutes'`).Scan(&due))
	_, err := pool.Exec(context.Background(), `UPDATE `+schema+`.slot SET fail_count = 1, attempts = 1, message = 'disk full',
		updated_at = $1::timestamptz - interval '1 hour',
		not_before = CASE slot_start WHEN '2026-03-01T05:00:00Z' THEN 'infinity'::timestamptz
			WHEN '2026-03-01T04:00:00Z' THEN now() + interval '1 hour' WHEN '2026-03-01T02:00:00Z' THEN $1::timestamptz END
		WHERE slot_start IN ('2026-03-01T02:00:00Z', '2026-03-01T03:00:00Z', '2026-03-01T04:00:00Z', '2026-03-01T05:00:00Z')`, due)
	require.NoError(t, err)
	overdue := "2 due for a retry since " + due.UTC().Format(time.RFC3339) + ", which any running worker makes: is a worker running (almanac run, or your program)?"

	r := cli(t, "--schema", schema, "failures")
	require.Equal(t, exitProblem, r.code, r.stderr)
	require.Equal(t, "almanac: 4 failed or parked slots: "+overdue+"; 1 in backoff: almanac retry runs it now; 1 parked: almanac retry gives it a fresh set of attempts; "+
		"see almanac history NAME SLOT for a slot's story\n", r.stderr)

	dry := decode[retryResult](t, cli(t, append([]string{"--schema", schema, "--json", "retry", "fails", "--dry-run"}, day...)...))
	require.Equal(t, int64(2), dry.Retried, "the one in backoff and the parked one")
	require.Equal(t, int64(2), dry.AlreadyDue)
	r = cli(t, append([]string{"--schema", schema, "retry", "fails"}, day...)...)
	requireOK(t, r)
	require.Equal(t, "retrying 2 slots of fails PT1H (UTC) in [2026-03-01T00:00:00Z, 2026-03-02T00:00:00Z) now (1 was parked)\nleft alone: "+overdue+"\n", r.stdout)
	dry = decode[retryResult](t, cli(t, append([]string{"--schema", schema, "--json", "retry", "fails", "--dry-run"}, day...)...))
	require.Equal(t, int64(0), dry.Retried, "what the dry run counted was retried")
	require.Equal(t, int64(3), dry.AlreadyDue, "the one that was in backoff is due now; the un-parked one has no failure left")
	r = cli(t, "--schema", schema, "failures")
	require.Contains(t, r.stderr, "; 1 due for a retry now: a running worker takes it within moments;")
}
