package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// coverageSchema is a migrated schema with a PT5M series "sensor" and a
// P1D series "billing" in Europe/Berlin.
func coverageSchema(t *testing.T) string {
	t.Helper()
	schema := freshSchema(t, "cli_cov_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "sensor", "--interval", "PT5M"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "billing", "--interval", "P1D", "--tz", "Europe/Berlin"))
	return schema
}

func execSQL(t *testing.T, schema, sql string, args ...any) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), sqlschema.Render(sql, schema), args...)
	require.NoError(t, err)
}

// slotSnapshot fingerprints every stored slot, every column included.
func slotSnapshot(t *testing.T, schema string) string {
	t.Helper()
	var s string
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), sqlschema.Render(
		`SELECT count(*) || ':' || md5(coalesce(string_agg(s::text, ',' ORDER BY name, "interval", slot_start), ''))
		FROM {{schema}}.slot s`, schema)).Scan(&s))
	return s
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	requireOK(t, r)
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	return v
}

func TestCoverageCommands(t *testing.T) {
	t.Parallel() // its own schema
	schema := coverageSchema(t)
	sensor := func(cmd string, extra ...string) []string {
		return append([]string{"--schema", schema, "--json", cmd, "sensor", "--interval", "PT5M"}, extra...)
	}
	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}

	// materialize, then again: idempotent.
	m := decode[materializeResult](t, cli(t, sensor("materialize", day...)...))
	require.Equal(t, materializeResult{rangeJSON: rangeJSON{"sensor", "PT5M", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"},
		Slots: 288, Inserted: 288}, m)
	m = decode[materializeResult](t, cli(t, sensor("materialize", append(day, "--dry-run")...)...))
	require.Equal(t, int64(0), m.Inserted)
	require.Equal(t, int64(288), m.Existing)
	require.True(t, m.DryRun)

	// Two hours missing, the rest in assorted states.
	execSQL(t, schema, `DELETE FROM {{schema}}.slot WHERE slot_start < '2026-03-01T02:00:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE slot_start < '2026-03-01T12:00:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = 'infinity', fail_count = 3 WHERE slot_start = '2026-03-01T12:00:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = now() + interval '1 hour', fail_count = 1 WHERE slot_start = '2026-03-01T12:05:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = '6ba7b810-9dad-11d1-80b4-00c04fd430c8',
		lease_until = '2030-01-01T00:00:00Z' WHERE slot_start = '2026-03-01T06:00:00Z'`)

	// gaps, machine and human, and --fail-on-gaps.
	r := cli(t, sensor("gaps", day...)...)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	for _, key := range []string{"name", "interval", "from", "to", "slots", "missing", "gaps", "not_complete"} {
		require.Contains(t, raw, key)
	}
	g := decode[gapsResult](t, r)
	require.Equal(t, []gapJSON{{"2026-03-01T00:00:00Z", "2026-03-01T02:00:00Z", 24}}, g.Gaps)
	require.Equal(t, int64(24), g.Missing)
	require.Equal(t, notCompleteJSON{Available: 142, Backoff: 1, Parked: 1, Acquired: 1}, g.NotComplete)
	r = cli(t, sensor("gaps", append(day, "--fail-on-gaps")...)...)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "24 slots missing in 1 gap")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &g), "the report is printed before exiting 1")
	r = cli(t, append([]string{"--schema", schema, "gaps", "sensor", "--interval", "PT5M"}, day...)...)
	requireOK(t, r)
	require.Contains(t, r.stdout, "GAP START")
	require.Contains(t, r.stdout, "2026-03-01T00:00:00Z  2026-03-01T02:00:00Z  24")
	require.Contains(t, r.stdout, "not complete: 142 available, 1 in backoff, 1 parked, 1 acquired, 0 skipped")
	r = cli(t, "--schema", schema, "gaps", "sensor", "--interval", "PT5M", "--from", "2026-03-01T02:00:00Z", "--to", "2026-03-01T03:00:00Z", "--fail-on-gaps")
	requireOK(t, r)
	require.Contains(t, r.stdout, "no gaps")

	// status: the stored extent by default, to now (the first slot not
	// due) when that is later, or a range.
	st := decode[statusResult](t, cli(t, sensor("status")...))
	require.Equal(t, "2026-03-01T02:00:00Z", *st.From)
	require.NotNil(t, st.Due)
	require.Equal(t, *st.Due, *st.To)
	since := st.Slots - 264 // the due slots after the last stored one
	require.Positive(t, since)
	require.Equal(t, statusResult{Name: "sensor", Interval: "PT5M", TimeZone: "UTC", From: st.From, To: st.To, Slots: 264 + since,
		Complete: 119, Available: 142, Backoff: 1, Parked: 1, Acquired: 1, CoveredPercent: float64(119) * 100 / float64(264+since),
		Missing: since, Gaps: 1, FirstMissing: ptr("2026-03-02T00:00:00Z"), Due: st.Due,
		OldestOpen: ptr("2026-03-01T06:00:00Z"), LastCompleted: st.LastCompleted, WaitingOn: []waitingOnJSON{}}, st)
	require.NotNil(t, st.LastCompleted)
	st = decode[statusResult](t, cli(t, sensor("status", day...)...))
	require.Equal(t, int64(24), st.Missing)
	require.Equal(t, int64(1), st.Gaps)
	require.Equal(t, "2026-03-01T00:00:00Z", *st.FirstMissing)
	r = cli(t, "--schema", schema, "status", "sensor", "--interval", "PT5M", "--from", "2026-03-01T02:00:00Z", "--to", "2026-03-02")
	requireOK(t, r)
	require.Contains(t, r.stdout, "covered         45.1 %")
	empty := decode[statusResult](t, cli(t, "--schema", schema, "--json", "status", "billing", "--interval", "P1D"))
	require.Nil(t, empty.From)
	require.Equal(t, float64(100), empty.CoveredPercent)

	// skip: one slot by its text (missing: inserted as SKIP), then a range.
	sk := decode[skipResult](t, cli(t, sensor("skip", "--slot", "2026-03-01T01:00:00+01:00/PT5M", "--reason", "outage")...))
	require.Equal(t, int64(1), sk.Inserted)
	require.Equal(t, "2026-03-01T00:00:00Z", sk.From)
	sk = decode[skipResult](t, cli(t, sensor("skip", "--from", "2026-03-01T05:50:00Z", "--to", "2026-03-01T06:10:00Z", "--reason", "outage")...))
	require.Equal(t, skipResult{rangeJSON: rangeJSON{"sensor", "PT5M", "2026-03-01T05:50:00Z", "2026-03-01T06:10:00Z"}, Complete: 3,
		Held: []heldJSON{{Slot: "2026-03-01T06:00:00Z/PT5M", Start: "2026-03-01T06:00:00Z", End: "2026-03-01T06:05:00Z", Status: "ACQUIRED",
			Owner: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", LeaseUntil: ptr("2030-01-01T00:00:00Z")}}}, sk)

	// reopen the finished morning: the leased slot is held and listed, and
	// reopen exits 1 so that scripts notice, after printing its report.
	morning := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T12:00:00Z"}
	leftAlone := func(r result) reopenResult {
		t.Helper()
		require.Equal(t, 1, r.code, r.stderr)
		require.Equal(t, `{"error":"almanac: reopen: left 1 slot in flight alone; reopen it once it finishes","exit_code":1}`+"\n", r.stderr, "under --json the error is JSON")
		var ro reopenResult
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ro), r.stdout)
		return ro
	}
	ro := leftAlone(cli(t, sensor("reopen", append(morning, "--dry-run")...)...))
	require.Equal(t, int64(120), ro.Reopened, "119 complete and 1 skipped")
	require.True(t, ro.DryRun)
	ro = leftAlone(cli(t, sensor("reopen", append(morning, "--reason", "late data", "--states", "complete")...)...))
	require.Equal(t, int64(119), ro.Reopened)
	require.Len(t, ro.Held, 1)
	r = cli(t, append([]string{"--schema", schema, "reopen", "sensor", "--interval", "PT5M", "--parked"}, day...)...)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "reopened 2 slots of sensor PT5M (UTC) in [2026-03-01T00:00:00Z, 2026-03-02T00:00:00Z)")
	require.Contains(t, r.stdout, "2026-03-01T06:00:00Z/PT5M  ACQUIRED  lease of 6ba7b810-9dad-11d1-80b4-00c04fd430c8 until 2030-01-01T00:00:00Z")
	ro = decode[reopenResult](t, cli(t, sensor("reopen", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T00:05:00Z", "--states", "skip")...))
	require.Equal(t, reopenResult{rangeJSON: rangeJSON{"sensor", "PT5M", "2026-03-01T00:00:00Z", "2026-03-01T00:05:00Z"}, Reopened: 0, Held: []heldJSON{}}, ro,
		"nothing held: exit 0")

	// retry: the slot in backoff.
	rt := decode[retryResult](t, cli(t, sensor("retry", day...)...))
	require.Equal(t, int64(1), rt.Retried)
	require.Equal(t, int64(0), rt.Unparked, "the parked slot was reopened above")
	require.Empty(t, rt.Held)

	// Local dates are read in the series' zone.
	b := decode[materializeResult](t, cli(t, "--schema", schema, "--json", "materialize", "billing", "--interval", "P1D",
		"--from", "2026-03-28", "--to", "2026-03-31"))
	require.Equal(t, materializeResult{rangeJSON: rangeJSON{"billing", "P1D", "2026-03-28T00:00:00+01:00", "2026-03-31T00:00:00+02:00"},
		Slots: 3, Inserted: 3}, b)
	bg := decode[gapsResult](t, cli(t, "--schema", schema, "--json", "gaps", "billing", "--interval", "P1D", "--from", "2026-03-28", "--to", "2026-03-31"))
	require.Empty(t, bg.Gaps)
	require.Equal(t, int64(3), bg.NotComplete.Available)
}

func ptr(s string) *string { return &s }

func TestCoverageHelp(t *testing.T) {
	for _, cmd := range []string{"materialize", "gaps", "status", "reopen", "retry", "skip"} {
		r := cliEnv(t, nil, cmd, "--help")
		require.Equal(t, 0, r.code, cmd)
		require.Contains(t, r.stdout, "--interval", cmd)
	}
}

func TestCoverageBadInputExitsTwoAndWritesNothing(t *testing.T) {
	t.Parallel() // its own schema
	schema := coverageSchema(t)
	requireOK(t, cli(t, "--schema", schema, "materialize", "sensor", "--interval", "PT5M", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T01:00:00Z"))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE slot_start < '2026-03-01T00:30:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = 'infinity' WHERE slot_start = '2026-03-01T00:30:00Z'`)
	before := slotSnapshot(t, schema)

	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}
	cmd := func(name string, extra ...string) []string {
		return append([]string{"--schema", schema, name, "sensor", "--interval", "PT5M"}, extra...)
	}
	var tests []struct {
		args []string
		want string
	}
	add := func(want string, args ...string) {
		tests = append(tests, struct {
			args []string
			want string
		}{args, want})
	}
	for _, name := range []string{"materialize", "gaps", "reopen", "retry", "skip", "status"} {
		reason := []string{}
		if name == "skip" {
			reason = []string{"--reason", "x"}
		}
		with := func(extra ...string) []string { return append(cmd(name, reason...), extra...) }
		add("not found", append([]string{"--schema", schema, name, "nope", "--interval", "PT5M"}, append(reason, day...)...)...)
		add("not found", append([]string{"--schema", schema, name, "sensor", "--interval", "PT1H"}, append(reason, day...)...)...)
		add(`no series is named "nope"`, append([]string{"--schema", schema, name, "nope"}, append(reason, day...)...)...)
		add(`"P0D"`, append([]string{"--schema", schema, name, "sensor", "--interval", "P0D"}, append(reason, day...)...)...)
		add("reversed", with("--from", "2026-03-02T00:00:00Z", "--to", "2026-03-01T00:00:00Z")...)
		add(`"yesterday"`, with("--from", "yesterday", "--to", "2026-03-01T00:00:00Z")...)
		add(`"2026-02-30"`, with("--from", "2026-02-30", "--to", "2026-03-01")...)
		add("--max-slots", with("--from", "2000-01-01", "--to", "2100-01-01")...)
		add("raise --max-slots to 288", with(append(day, "--max-slots", "100")...)...)
		add("--max-slots 0", with(append(day, "--max-slots", "0")...)...)
		add("expects one series NAME", append([]string{"--schema", schema, name, "--interval", "PT5M"}, day...)...)
		if name != "status" {
			add("--from and --to are required", with("--from", "2026-03-01")...)
		}
	}
	add("give both --from and --to, or neither", cmd("status", "--to", "2026-03-01")...)
	add("--reason is required", cmd("skip", day...)...)
	add("give either --slot or --from and --to", cmd("skip", append(day, "--slot", "2026-03-01T00:00:00Z/PT5M", "--reason", "x")...)...)
	add("give either --slot or --from and --to", cmd("skip", "--reason", "x")...)
	add(`missing offset`, cmd("skip", "--slot", "2026-03-01T00:00/PT5M", "--reason", "x")...)
	add(`not a slot boundary`, cmd("skip", "--slot", "2026-03-01T00:01:00Z/PT5M", "--reason", "x")...)
	add(`not the series interval`, cmd("skip", "--slot", "2026-03-01T00:00:00Z/PT1H", "--reason", "x")...)
	add(`--states "ACQUIRED"`, cmd("reopen", append(day, "--states", "ACQUIRED")...)...)
	add(`unknown flag: --fail-on-gaps`, cmd("materialize", append(day, "--fail-on-gaps")...)...)

	for _, tt := range tests {
		r := cli(t, tt.args...)
		require.Equal(t, 2, r.code, "%q: stderr %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.want, "%q", tt.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		require.Empty(t, r.stdout, "%q", tt.args)
	}
	require.Equal(t, before, slotSnapshot(t, schema), "nothing was written")
}

func TestCoverageUnavailable(t *testing.T) {
	unreachable := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT": "200ms"}
	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}
	for _, name := range []string{"materialize", "gaps", "status", "reopen", "retry", "skip"} {
		args := append([]string{name, "sensor", "--interval", "PT5M", "--reason", "x"}, day...)
		if name != "skip" {
			args = append([]string{name, "sensor", "--interval", "PT5M"}, day...)
		}
		r := cliEnv(t, unreachable, args...)
		require.Equal(t, 3, r.code, "%v: %s", args, r.stderr)
		// Malformed input is found before the database is tried.
		r = cliEnv(t, unreachable, append(args, "--from", "2026-13-01")...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
	}
	schema := freshSchema(t, "cli_cov_unmigrated_")
	r := cli(t, append([]string{"--schema", schema, "gaps", "sensor", "--interval", "PT5M"}, day...)...)
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "migrate up")
}

// TestSeriesListFlagsUnusableRows: rows plain SQL stored with a name,
// interval or zone almanac refuses are flagged (a warning line, an
// "error" field), the others are listed, and the exit code is 0; compact
// over every series passes them by. Before, series list exited 2.
func TestSeriesListFlagsUnusableRows(t *testing.T) {
	schema := coverageSchema(t)
	execSQL(t, schema, `INSERT INTO {{schema}}.series (name, "interval", time_zone, origin) VALUES
		('bad`+"\x1b"+`[2J', 'PT1H', 'UTC', '2000-01-01T00:00:00Z'),
		('zero', 'P0D', 'UTC', '2000-01-01T00:00:00Z'),
		('mars', 'PT1H', 'Mars/Olympus', '2000-01-01T00:00:00Z')`)
	r := cli(t, "--schema", schema, "series", "list")
	requireOK(t, r)
	require.Contains(t, r.stdout, "sensor")
	require.Contains(t, r.stdout, "billing")
	require.Equal(t, 3, strings.Count(r.stderr, "almanac: warning: stored series"), r.stderr)
	require.Contains(t, r.stderr, "Mars/Olympus")
	require.NotContains(t, r.stderr+r.stdout, "\x1b", "no raw control character reaches the terminal")

	list := decode[[]seriesJSON](t, cli(t, "--schema", schema, "--json", "series", "list"))
	require.Len(t, list, 5)
	var flagged int
	for _, s := range list {
		if s.Error != "" {
			flagged++
		}
	}
	require.Equal(t, 3, flagged)
	requireOK(t, cli(t, "--schema", schema, "compact", "--older-than", "1d"))
}
