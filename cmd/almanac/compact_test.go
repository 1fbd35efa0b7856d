package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCompactCommand compacts one series then every series, keeps their
// status, and refuses bad input with exit 2 and nothing written.
func TestCompactCommand(t *testing.T) {
	schema := coverageSchema(t)
	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}
	requireOK(t, cli(t, append([]string{"--schema", schema, "materialize", "sensor", "--interval", "PT5M"}, day...)...))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE slot_start < '2026-03-01T02:00:00Z'`)
	before := slotSnapshot(t, schema)

	for _, tt := range []struct {
		want string
		args []string
	}{
		{"give one of --before T and --older-than D", nil},
		{"give one of --before T and --older-than D", []string{"--before", "2026-03-01", "--older-than", "1d"}},
		{`--older-than "soon"`, []string{"--older-than", "soon"}},
		{`--older-than "-3d"`, []string{"--older-than", "-3d"}},
		{`"yesterday"`, []string{"--before", "yesterday"}},
		{"needs a series NAME", []string{"--interval", "PT5M", "--before", "2026-03-01"}},
		{"not found", []string{"nope", "--interval", "PT5M", "--before", "2026-03-01"}},
		{"--interval is required", []string{"sensor", "--before", "2026-03-01"}},
		{"at most one series NAME", []string{"sensor", "billing", "--before", "2026-03-01"}},
	} {
		args := append([]string{"--schema", schema, "compact"}, tt.args...)
		r := cli(t, args...)
		require.Equal(t, 2, r.code, "%q: stderr %s", args, r.stderr)
		require.Contains(t, r.stderr, tt.want, "%q", args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	require.Equal(t, before, slotSnapshot(t, schema), "nothing was written")

	sensor := []string{"--schema", schema, "--json", "compact", "sensor", "--interval", "PT5M", "--before", "2026-03-01T01:00:00Z"}
	dry := decode[compactResult](t, cli(t, append(sensor, "--dry-run")...))
	require.Equal(t, compactResult{DryRun: true, Before: "2026-03-01T01:00:00Z", Series: 1, Compacted: 12}, dry)
	require.Equal(t, before, slotSnapshot(t, schema), "a dry run writes nothing")
	res := decode[compactResult](t, cli(t, sensor...))
	require.Equal(t, compactResult{Before: "2026-03-01T01:00:00Z", Series: 1, Compacted: 12, Ranges: 1}, res)

	// Every series, by age: the rest of the finished slots.
	r := cli(t, "--schema", schema, "compact", "--older-than", "PT24H")
	requireOK(t, r)
	require.Contains(t, r.stdout, "compacted 12 finished slot(s) of 2 series")
	st := decode[statusResult](t, cli(t, append([]string{"--schema", schema, "--json", "status", "sensor", "--interval", "PT5M"}, day...)...))
	require.Equal(t, int64(24), st.Complete, "compacted slots are still complete")
	require.Equal(t, int64(264), st.Available)
	st = decode[statusResult](t, cli(t, "--schema", schema, "--json", "status", "sensor", "--interval", "PT5M"))
	require.Equal(t, "2026-03-01T00:00:00Z", *st.From, "the default range includes compacted slots")
	require.Equal(t, int64(24), st.Complete)
}

// TestCompactOlderThanByDatabaseClock: --older-than counts back from the
// database's clock, so a host whose clock runs two days ahead compacts
// nothing that finished within the age by the database's clock.
func TestCompactOlderThanByDatabaseClock(t *testing.T) {
	schema := coverageSchema(t)
	execSQL(t, schema, `INSERT INTO {{schema}}.slot (name, interval, slot_start, slot_end, status, completed_at)
		SELECT 'sensor', 'PT5M', s, s + interval '5 minutes', 'COMPLETE', now()
		FROM generate_series(date_trunc('hour', clock_timestamp()) - interval '2 hours', date_trunc('hour', clock_timestamp()) - interval '5 minutes', interval '5 minutes') AS s`)
	ahead := hostClock
	hostClock = func() time.Time { return time.Now().Add(48 * time.Hour) }
	defer func() { hostClock = ahead }()

	res := decode[compactResult](t, cli(t, "--schema", schema, "--json", "compact", "--older-than", "PT24H"))
	require.Zero(t, res.Compacted, "slots that ended within the last day by the database clock stay")
	res = decode[compactResult](t, cli(t, "--schema", schema, "--json", "compact", "sensor", "--interval", "PT5M", "--older-than", "PT5M"))
	require.Positive(t, res.Compacted, "slots that ended more than 5 minutes ago by the database clock go")
}

// TestMigrateStagedAndBelowCompaction: migrate up --to N applies up to N
// only; migrating down below version 3 with compacted slots is refused
// (exit 1, nothing undone past it) unless --discard, since they would come
// back as gaps that workers run again.
func TestMigrateStagedAndBelowCompaction(t *testing.T) {
	schema := freshSchema(t, "cli_stage_")
	r := cli(t, "--schema", schema, "--json", "migrate", "up", "--to", "3")
	requireOK(t, r)
	staged := decode[migrateResult](t, r)
	require.Equal(t, []int{1, 2, 3}, staged.Applied)
	require.Equal(t, 3, staged.Version)
	r = cli(t, "--schema", schema, "migrate", "up")
	requireOK(t, r)
	require.NotContains(t, r.stdout, "applied 003_")
	require.Contains(t, r.stdout, "applied 004_")

	requireOK(t, cli(t, "--schema", schema, "series", "add", "sensor", "--interval", "PT5M"))
	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T02:00:00Z"}
	requireOK(t, cli(t, append([]string{"--schema", schema, "materialize", "sensor", "--interval", "PT5M"}, day...)...))
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now()`)
	requireOK(t, cli(t, "--schema", schema, "compact", "sensor", "--interval", "PT5M", "--before", "2026-03-01T01:00:00Z"))

	r = cli(t, "--schema", schema, "migrate", "down", "--to", "2", "--yes")
	require.Equal(t, 1, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "cannot undo migration 3: 1 compacted range(s)")
	require.Contains(t, r.stderr, "--discard")
	st := decode[statusResult](t, cli(t, append([]string{"--schema", schema, "--json", "status", "sensor", "--interval", "PT5M"}, day...)...))
	require.Equal(t, int64(24), st.Complete, "the compacted slots are still finished")

	requireOK(t, cli(t, "--schema", schema, "migrate", "down", "--to", "2", "--discard", "--yes"))
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
}
