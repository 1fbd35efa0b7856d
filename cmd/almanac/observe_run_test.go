//go:build unix

package main

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serving finds the address almanac run --http logs once it listens.
var serving = regexp.MustCompile(`serving /metrics, /healthz and /readyz" address=(http://[0-9.:]+)`)

// TestRunHTTP runs the sidecar with --http on a free port: it is ready once
// its job is registered, and its /metrics counts what the database holds
// after it worked a range, one slot of which fails for good.
func TestRunHTTP(t *testing.T) {
	bin := buildAlmanac(t)
	schema := migrated(t)
	p := start(t, bin, "--schema", schema, "run", "served", "--interval", "PT1M", "--max-attempts", "1",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:05:00Z", "--http", "127.0.0.1:0",
		"--", "sh", "-c", `[ "$ALMANAC_SLOT_START" != 2026-01-01T00:02:00Z ]`)
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
	// Ready once the named series is served, which follows the listening
	// line: until then /readyz says why not.
	var body string
	waitFor(t, "readiness", time.Minute, func() bool {
		code, body = get(t, base+"/readyz")
		return code == 200
	})
	waitFor(t, "the range to be worked", time.Minute, func() bool {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' OR not_before = 'infinity'`) == 5
	})
	// The counters are recorded before the next slot is looked for; the
	// gauges are read at the scrape.
	waitFor(t, "the last outcome to be counted", time.Minute, func() bool {
		_, body = get(t, base+"/metrics")
		return regexp.MustCompile(`almanac_slots_completed_total\{[^}]*almanac_series="served"[^}]*\} 4\n`).MatchString(body)
	})
	require.EqualValues(t, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`),
		metricSum(t, body, "almanac_slots_completed_total", "served"))
	require.EqualValues(t, 1, metricSum(t, body, "almanac_slots_parked_total", "served"))
	require.EqualValues(t, 1, metricSum(t, body, "almanac_slots_open", "served"), "the parked slot")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, time.Minute))
}
