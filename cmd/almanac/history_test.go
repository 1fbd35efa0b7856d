package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestHistoryCommand: a slot re-opened by an operator and by plain SQL,
// then failed, shows who did what and why, by slot text or by a time;
// status shows the last note; --prune deletes what is past the retention.
func TestHistoryCommand(t *testing.T) {
	schema := coverageSchema(t)
	s := func(args ...string) []string { return append([]string{"--schema", schema}, args...) }
	requireOK(t, cli(t, s("materialize", "billing", "--interval", "P1D", "--from", "2026-03-01", "--to", "2026-03-03")...))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now()`)
	requireOK(t, cli(t, s("reopen", "billing", "--interval", "P1D", "--from", "2026-03-01", "--to", "2026-03-02",
		"--reason", "late invoices", "--actor", "ops@ci")...))
	requireOK(t, cli(t, s("reopen", "billing", "--interval", "P1D", "--from", "2026-03-02", "--to", "2026-03-03")...))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE slot_start = '2026-03-01T00:00:00+01:00'`)
	execSQL(t, schema, `BEGIN; SET LOCAL almanac.actor = 'invoice-service';
		UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'corrected invoice 42' WHERE slot_start = '2026-03-01T00:00:00+01:00'; COMMIT`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET fail_count = 1, message = 'upstream 503', not_before = 'infinity', updated_at = clock_timestamp()
		WHERE slot_start = '2026-03-01T00:00:00+01:00'`)

	h := decode[historyResult](t, cli(t, s("--json", "history", "billing", "2026-03-01T00:00:00+01:00/P1D")...))
	require.Equal(t, "2026-03-01T00:00:00+01:00/P1D", h.Slot)
	require.Equal(t, "2026-03-02T00:00:00+01:00", h.End)
	require.NotNil(t, h.Current)
	require.Equal(t, int64(3), h.Current.Generation)
	require.True(t, h.Current.Parked)
	var brief []string
	for _, e := range h.Events {
		brief = append(brief, strings.Join([]string{e.Event, e.Actor, e.Message}, "|"))
	}
	require.Equal(t, []string{
		"reopened|ops@ci|late invoices",
		"reopened|invoice-service|corrected invoice 42",
		"changed_by_sql|" + sqlActor(t) + "|upstream 503",
	}, brief)

	// The same slot by a time inside it, in the series' zone, as text.
	r := cli(t, s("history", "billing", "2026-03-01T13:30", "--interval", "P1D")...)
	requireOK(t, r)
	require.Contains(t, r.stdout, "slot  billing 2026-03-01T00:00:00+01:00/P1D\n")
	require.Contains(t, r.stdout, "now   AVAILABLE (parked), generation 3, attempts 0, failures 1, fence 0")
	require.Contains(t, r.stdout, "      message: upstream 503\n")
	require.Regexp(t, `\n2026-\S+ +reopened +2 +- +- +ops@ci +late invoices\n`, r.stdout)
	require.Regexp(t, `\n2026-\S+ +reopened +3 +- +- +invoice-service +corrected invoice 42\n`, r.stdout)

	// Without --actor, the operator is recorded.
	h = decode[historyResult](t, cli(t, s("--json", "history", "billing", "2026-03-02", "--interval", "P1D")...))
	require.Len(t, h.Events, 1)
	require.Equal(t, (&app{getenv: os.Getenv}).operator(), h.Events[0].Actor)
	require.Equal(t, "reopened", h.Events[0].Message)

	// A slot never stored.
	r = cli(t, s("history", "billing", "2027-01-01T00:00:00+01:00/P1D")...)
	requireOK(t, r)
	require.Contains(t, r.stdout, "now   not stored")
	require.Contains(t, r.stdout, "no events recorded")

	st := decode[statusResult](t, cli(t, s("--json", "status", "billing", "--interval", "P1D")...))
	require.Equal(t, &noteJSON{Slot: "2026-03-01T00:00:00+01:00/P1D", Status: "AVAILABLE", Parked: true, Message: "upstream 503",
		At: st.LastNote.At}, st.LastNote)
	r = cli(t, s("status", "billing", "--interval", "P1D")...)
	requireOK(t, r)
	require.Contains(t, r.stdout, "last note       2026-03-01T00:00:00+01:00/P1D (parked, ")

	// Pruning follows the retention, on the database clock.
	execSQL(t, schema, `UPDATE {{schema}}.slot_event SET at = at - interval '100 days' WHERE event = 'changed_by_sql'`)
	p := decode[pruneResult](t, cli(t, s("--json", "history", "--prune", "--dry-run")...))
	require.Equal(t, pruneResult{DryRun: true, Pruned: 1}, p)
	r = cli(t, s("history", "--prune")...)
	requireOK(t, r)
	require.Equal(t, "pruned 1 history event older than the retention\n", r.stdout)
	h = decode[historyResult](t, cli(t, s("--json", "history", "billing", "2026-03-01T00:00:00+01:00/P1D")...))
	require.Len(t, h.Events, 2)

	// A compacted slot is finished, not "not stored".
	requireOK(t, cli(t, s("materialize", "billing", "--interval", "P1D", "--from", "2026-02-01", "--to", "2026-02-03")...))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE slot_start < '2026-02-03T00:00:00+01:00'`)
	requireOK(t, cli(t, s("compact", "billing", "--interval", "P1D", "--before", "2026-02-03T00:00:00+01:00")...))
	h = decode[historyResult](t, cli(t, s("--json", "history", "billing", "2026-02-01T00:00:00+01:00/P1D")...))
	require.Nil(t, h.Current)
	require.NotNil(t, h.Compacted)
	require.Equal(t, "COMPLETE", h.Compacted.Status)
	r = cli(t, s("history", "billing", "2026-02-01T00:00:00+01:00/P1D")...)
	requireOK(t, r)
	require.Contains(t, r.stdout, "now   COMPLETE, compacted (row deleted; its run's highest generation 1, latest completion ")
}

// sqlActor is the actor the plain-SQL trigger records for the test pool's
// sessions.
func sqlActor(t *testing.T) string {
	t.Helper()
	var actor string
	require.NoError(t, pgtest.Pool(t).QueryRow(t.Context(),
		`SELECT session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')`).Scan(&actor))
	return actor
}

// TestStoredTextPrintsAsItIs: messages and actors that plain SQL wrote with
// terminal escape sequences (a window title, an OSC 8 hyperlink, a screen
// clear, carriage return and backspace overwrites, bidirectional overrides,
// an 8-bit CSI) reach the terminal escaped by history, status and failures,
// never raw; --json keeps the stored text exactly.
func TestStoredTextPrintsAsItIs(t *testing.T) {
	t.Parallel() // its own schema
	schema := coverageSchema(t)
	s := func(args ...string) []string { return append([]string{"--schema", schema}, args...) }
	requireOK(t, cli(t, s("materialize", "billing", "--interval", "P1D", "--from", "2026-03-01", "--to", "2026-03-02")...))
	const (
		message = "\x1b]0;pwned\x07\x1b[2J\x1b[Hdisk ok\rFAKE: all slots complete\x1b]8;;https://evil.example/\x1b\\details\x1b]8;;\x1b\\"
		actor   = "ops\b\b\broot\u202e@evil\u2066\u009b31m"
	)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET fail_count = 1, message = $1, not_before = 'infinity', updated_at = clock_timestamp()`, message)
	execSQL(t, schema, `INSERT INTO {{schema}}.slot_event (name, "interval", slot_start, event, generation, actor, message)
		VALUES ('billing', 'P1D', '2026-03-01T00:00:00+01:00', 'reopened', 1, $1, $2)`, actor, message)

	for _, args := range [][]string{
		{"history", "billing", "2026-03-01T00:00:00+01:00/P1D"},
		{"status", "billing", "--interval", "P1D"},
		{"failures", "billing"},
	} {
		r := cli(t, s(args...)...)
		require.Contains(t, []int{exitOK, exitProblem}, r.code, "%v: %s", args, r.stderr)
		for _, bad := range []string{"\x1b", "\x07", "\r", "\b", "\u202e", "\u2066", "\u009b"} {
			require.NotContains(t, r.stdout, bad, "%v printed %q raw:\n%s", args, bad, r.stdout)
		}
	}
	// What is stored shows, escaped.
	r := cli(t, s("history", "billing", "2026-03-01T00:00:00+01:00/P1D")...)
	require.Contains(t, r.stdout, `ops\b\b\broot\u202e@evil\u2066\u009b31m`)
	require.Contains(t, r.stdout, `message: "\x1b]0;pwned\a\x1b[2J\x1b[Hdisk ok FAKE: all slots complete\x1b]8;;https://evil.example/`)
	r = cli(t, s("status", "billing", "--interval", "P1D")...)
	require.Contains(t, r.stdout, `"\x1b]0;pwned\a`)

	h := decode[historyResult](t, cli(t, s("--json", "history", "billing", "2026-03-01T00:00:00+01:00/P1D")...))
	require.Equal(t, message, h.Current.Message)
	require.Len(t, h.Events, 2) // the UPDATE's changed_by_sql, then the inserted one
	require.Equal(t, actor, h.Events[1].Actor)
	require.Equal(t, message, h.Events[1].Message)
	st := decode[statusResult](t, cli(t, s("--json", "status", "billing", "--interval", "P1D")...))
	require.Equal(t, message, st.LastNote.Message)
}
