package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFutureSlotsAreNotMissing is issue 38's example: a P1D series whose
// future slots have no rows yet. They are "not due", never missing, and
// --fail-on-gaps over a future month exits 0; a series lag moves the due
// boundary for every report.
func TestFutureSlotsAreNotMissing(t *testing.T) {
	t.Parallel() // its own schema
	schema := freshSchema(t, "cli_due_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "fut", "--interval", "P1D"))
	fut := func(cmd string, extra ...string) []string {
		return append([]string{"--schema", schema, "--json", cmd, "fut", "--interval", "P1D"}, extra...)
	}
	past := []string{"--from", "2026-01-01", "--to", "2026-01-10"}
	future := []string{"--from", "2040-01-01", "--to", "2040-02-01"}
	requireOK(t, cli(t, fut("materialize", past...)...))
	execSQL(t, schema, `DELETE FROM {{schema}}.slot WHERE slot_start = '2026-01-05T00:00:00Z'`)

	g := decode[gapsResult](t, cli(t, fut("gaps", future...)...))
	require.Equal(t, int64(0), g.Missing)
	require.Equal(t, int64(31), g.NotDue)
	require.Empty(t, g.Gaps)
	r := cli(t, fut("gaps", append(future, "--fail-on-gaps")...)...)
	require.Equal(t, 0, r.code, r.stderr)

	g = decode[gapsResult](t, cli(t, fut("gaps", past...)...))
	require.Equal(t, int64(1), g.Missing)
	require.Equal(t, int64(0), g.NotDue)
	r = cli(t, fut("gaps", append(past, "--fail-on-gaps")...)...)
	require.Equal(t, exitProblem, r.code, r.stdout)

	// A range across now: only the past part can be missing.
	st := decode[statusResult](t, cli(t, fut("status", "--from", "2026-01-01", "--to", "2040-01-01")...))
	require.Positive(t, st.NotDue)
	require.NotNil(t, st.Due)
	require.Equal(t, st.Slots, st.Complete+st.Skip+st.Available+st.Backoff+st.Parked+st.Acquired+st.Missing+st.NotDue)
	require.Equal(t, int64(1)+daysBetween(t, "2026-01-10", *st.Due), st.Missing)

	// The default range ends at now: the days since the last stored slot
	// are missing.
	def := decode[statusResult](t, cli(t, fut("status")...))
	require.Equal(t, st.Missing, def.Missing)
	require.Equal(t, int64(0), def.NotDue)

	// A lag of about 15 years makes the past range not due.
	requireOK(t, cli(t, "--schema", schema, "series", "set", "fut", "--interval", "P1D", "--lag", "131400h"))
	g = decode[gapsResult](t, cli(t, fut("gaps", append(past, "--fail-on-gaps")...)...))
	require.Equal(t, int64(0), g.Missing)
	require.Equal(t, int64(1), g.NotDue)
	list := decode[[]seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "list"))
	require.Equal(t, "131400h0m0s", list[0].Lag)

	// Bad input: one line, exit 2, nothing written.
	for _, args := range [][]string{
		{"series", "set", "fut", "--interval", "P1D", "--lag", "-1h"},
		{"series", "set", "fut", "--interval", "P1D", "--lag", "soon"},
		{"series", "set", "fut", "--interval", "P1D"},
		{"series", "set", "nope", "--interval", "P1D", "--lag", "1h"},
	} {
		r := cli(t, append([]string{"--schema", schema}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
	list = decode[[]seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "list"))
	require.Equal(t, "131400h0m0s", list[0].Lag)
}

// daysBetween counts the days from the date from to the RFC 3339 time to.
func daysBetween(t *testing.T, from, to string) int64 {
	t.Helper()
	a, err := time.Parse("2006-01-02", from)
	require.NoError(t, err)
	b, err := time.Parse(time.RFC3339, to)
	require.NoError(t, err)
	return int64(b.Sub(a) / (24 * time.Hour))
}

// TestSeriesPauseResume: pause and resume from the command line, shown by
// series list and status; bad input is refused before anything is written.
func TestSeriesPauseResume(t *testing.T) {
	t.Parallel() // its own schema
	schema := freshSchema(t, "cli_pause_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "feed", "--interval", "PT1H"))
	s := decode[seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "pause", "feed", "--interval", "PT1H",
		"--reason", "vendor outage", "--actor", "ana@ops"))
	require.NotNil(t, s.Paused)
	require.Equal(t, "ana@ops", s.Paused.By)
	require.Equal(t, "vendor outage", s.Paused.Reason)
	st := decode[statusResult](t, cli(t, "--schema", schema, "--json", "status", "feed", "--interval", "PT1H"))
	require.NotNil(t, st.Paused)
	r := cli(t, "--schema", schema, "series", "list")
	requireOK(t, r)
	require.Contains(t, r.stdout, "by ana@ops: vendor outage")
	r = cli(t, "--schema", schema, "status", "feed", "--interval", "PT1H")
	requireOK(t, r)
	require.Contains(t, r.stdout, "by ana@ops: vendor outage")

	for _, args := range [][]string{
		{"series", "resume", "feed", "--interval", "PT1H", "--reason", "bad\x01"},
		{"series", "resume", "nope", "--interval", "PT1H"},
		{"series", "resume", "feed", "--interval", "PT5M"},
	} {
		r := cli(t, append([]string{"--schema", schema}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
	// Without --interval: the name's only one.
	s = decode[seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "resume", "feed"))
	require.Nil(t, s.Paused)

	// The fleet-wide cap.
	s = decode[seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "set", "feed", "--interval", "PT1H", "--max-in-flight", "2"))
	require.Equal(t, 2, s.MaxInFlight)
	r = cli(t, "--schema", schema, "series", "set", "feed", "--interval", "PT1H", "--max-in-flight", "-1")
	require.Equal(t, exitUsage, r.code, r.stderr)
	s = decode[seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "set", "feed", "--interval", "PT1H", "--lag", "5m"))
	require.Equal(t, 2, s.MaxInFlight, "only the flags given change")
	require.Equal(t, "5m0s", s.Lag)
	s = decode[seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "set", "feed", "--max-in-flight", "0"))
	require.Zero(t, s.MaxInFlight)
}

// TestSeriesAfter: issue 38's command line for dependencies: --after
// (repeatable), series deps, and a cycle refused with exit 2 naming it.
func TestSeriesAfter(t *testing.T) {
	t.Parallel() // its own schema
	schema := freshSchema(t, "cli_after_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "ingest", "--interval", "PT1H"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "prices", "--interval", "PT15M"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "report", "--interval", "P1D", "--tz", "Europe/Berlin",
		"--after", "ingest:PT1H", "--after", "prices:PT15M"))
	d := decode[depsJSON](t, cli(t, "--schema", schema, "--json", "series", "deps", "report", "--interval", "P1D"))
	require.Len(t, d.After, 2)
	require.Equal(t, "ingest", d.After[0].Name)
	require.Equal(t, "prices", d.After[1].Name)
	d = decode[depsJSON](t, cli(t, "--schema", schema, "--json", "series", "deps", "ingest", "--interval", "PT1H"))
	require.Len(t, d.Before, 1)
	require.Equal(t, "report", d.Before[0].Name)

	r := cli(t, "--schema", schema, "series", "add", "ingest", "--interval", "PT1H", "--after", "report:P1D")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "ingest PT1H → report P1D → ingest PT1H")
	for _, args := range [][]string{
		{"series", "add", "x", "--interval", "PT1H", "--after", "nope:PT1H"},
		{"series", "add", "x", "--interval", "PT1H", "--after", "ingest"},
		{"series", "add", "x", "--interval", "PT1H", "--after", "ingest:P0D"},
	} {
		r := cli(t, append([]string{"--schema", schema}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
	list := decode[[]seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "list"))
	require.Len(t, list, 3, "nothing written by refused commands")
	// series set keeps the upstream list.
	requireOK(t, cli(t, "--schema", schema, "series", "set", "report", "--interval", "P1D", "--lag", "1h"))
	d = decode[depsJSON](t, cli(t, "--schema", schema, "--json", "series", "deps", "report", "--interval", "P1D"))
	require.Len(t, d.After, 2)
}
