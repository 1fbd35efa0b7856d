package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStatusWaitingOn: status of a report waiting for its ingest lists,
// in JSON and in text, the ingest hour it waits on (parked, with its
// failure) and the hours without a row; history shows the re-open a
// changed ingest hour propagated, with its cause.
func TestStatusWaitingOn(t *testing.T) {
	t.Parallel() // its own schema
	schema := freshSchema(t, "cli_up_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "ingest", "--interval", "PT1H"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "report", "--interval", "P1D", "--after", "ingest:PT1H"))
	day := []string{"--from", "2026-03-04T00:00:00Z", "--to", "2026-03-05T00:00:00Z"}
	requireOK(t, cli(t, append([]string{"--schema", schema, "materialize", "report", "--interval", "P1D"}, day...)...))
	requireOK(t, cli(t, "--schema", schema, "materialize", "ingest", "--interval", "PT1H", "--from", "2026-03-04T00:00:00Z", "--to", "2026-03-04T20:00:00Z"))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE name = 'ingest' AND slot_start < '2026-03-04T19:00:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = 'infinity', message = 'source offline' WHERE name = 'ingest' AND slot_start = '2026-03-04T19:00:00Z'`)

	args := append([]string{"--schema", schema, "status", "report", "--interval", "P1D"}, day...)
	st := decode[statusResult](t, cli(t, append([]string{"--json"}, args...)...))
	require.EqualValues(t, 1, st.WaitingUpstream)
	require.Equal(t, []waitingOnJSON{
		{Waiting: "2026-03-04T00:00:00Z/P1D", Series: "ingest", Interval: "PT1H", From: "2026-03-04T19:00:00Z", To: "2026-03-04T20:00:00Z",
			Status: "AVAILABLE", Parked: true, Message: "source offline", At: st.WaitingOn[0].At},
		{Waiting: "2026-03-04T00:00:00Z/P1D", Series: "ingest", Interval: "PT1H", From: "2026-03-04T20:00:00Z", To: "2026-03-05T00:00:00Z",
			Status: "MISSING"},
	}, st.WaitingOn)
	require.NotNil(t, st.WaitingOn[0].At)

	r := cli(t, args...)
	requireOK(t, r)
	require.Regexp(t, `waiting for upstream +1 of them\n +2026-03-04T00:00:00Z/P1D +waits on ingest PT1H \[2026-03-04T19:00:00Z, 2026-03-04T20:00:00Z\) parked: source offline\n +waits on ingest PT1H \[2026-03-04T20:00:00Z, 2026-03-05T00:00:00Z\) MISSING\n`, r.stdout)

	// Once the ingest is done the report runs; a re-open of an ingest hour
	// re-opens it, and its history says why.
	requireOK(t, cli(t, "--schema", schema, "materialize", "ingest", "--interval", "PT1H", "--from", "2026-03-04T00:00:00Z", "--to", "2026-03-05T00:00:00Z"))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now(), not_before = NULL`)
	st = decode[statusResult](t, cli(t, append([]string{"--json"}, args...)...))
	require.Zero(t, st.WaitingUpstream)
	require.Equal(t, []waitingOnJSON{}, st.WaitingOn)
	requireOK(t, cli(t, "--schema", schema, "reopen", "ingest", "--interval", "PT1H", "--from", "2026-03-04T05:00:00Z", "--to", "2026-03-04T06:00:00Z", "--reason", "late rows"))
	h := cli(t, "--schema", schema, "history", "report", "2026-03-04T00:00:00Z/P1D")
	requireOK(t, h)
	require.Contains(t, h.stdout, "upstream ingest 2026-03-04T05:00:00Z/PT1H re-opened")
}
