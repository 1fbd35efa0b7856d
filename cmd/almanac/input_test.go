package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestMessagesSayWhatWasReadAndHow: every message names what was read and
// how. A basic-format date was described as a five-digit year; a local
// time refused for a Berlin series was said to be "read in UTC"; a dry-run
// skip said "inserted"; results did not name the zone local times were
// read in.
func TestMessagesSayWhatWasReadAndHow(t *testing.T) {
	schema := coverageSchema(t) // sensor PT5M UTC, billing P1D Europe/Berlin
	billing := func(cmd string, extra ...string) []string {
		return append([]string{"--schema", schema, cmd, "billing", "--interval", "P1D"}, extra...)
	}
	r := cli(t, billing("gaps", "--from", "20260301", "--to", "2026-03-05")...)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, `--from: invalid time "20260301"`)
	require.Contains(t, r.stderr, "write it as 2026-03-01")

	r = cli(t, billing("gaps", "--from", "2026-03-01T25:00", "--to", "2026-03-05")...)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.NotContains(t, r.stderr, "UTC", "the Berlin series' times are not read in UTC")

	// A local --to past the limits in New York is refused naming the zone.
	requireOK(t, cli(t, "--schema", schema, "series", "add", "ny", "--interval", "PT1H", "--tz", "America/New_York"))
	r = cli(t, "--schema", schema, "gaps", "ny", "--interval", "PT1H", "--from", "9999-12-30", "--to", "9999-12-31T02:00")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "read in America/New_York is 9999-12-31T07:00:00Z")

	r = cli(t, billing("skip", "--from", "2026-03-01", "--to", "2026-03-03", "--reason", "holiday", "--dry-run")...)
	requireOK(t, r)
	require.Equal(t, "dry run: would skip 0 slots of billing P1D (Europe/Berlin) in [2026-03-01T00:00:00+01:00, 2026-03-03T00:00:00+01:00)"+
		" and would insert 2 missing slots as SKIP; left alone: 0 complete, 0 already skipped\n", r.stdout)
	r = cli(t, billing("skip", "--from", "2026-03-01", "--to", "2026-03-03", "--reason", "holiday")...)
	requireOK(t, r)
	require.Contains(t, r.stdout, "skipped 0 slots of billing P1D (Europe/Berlin) in [2026-03-01T00:00:00+01:00, 2026-03-03T00:00:00+01:00) and inserted 2 missing slots")
	for _, cmd := range [][]string{{"materialize", "--dry-run"}, {"reopen", "--dry-run"}, {"retry", "--dry-run"}, {"gaps"}} {
		r := cli(t, billing(cmd[0], append([]string{"--from", "2026-03-01", "--to", "2026-03-03"}, cmd[1:]...)...)...)
		requireOK(t, r)
		require.Contains(t, r.stdout, "billing P1D (Europe/Berlin) in [2026-03-01T00:00:00+01:00, 2026-03-03T00:00:00+01:00)", cmd)
	}
}

// TestInvisibleCharactersInStoredNames: series another tool stored with
// names that print like other names are listed with the difference made
// visible, and cannot be registered through almanac.
func TestInvisibleCharactersInStoredNames(t *testing.T) {
	schema := coverageSchema(t)
	for _, name := range []string{"sensor\u200b", "\u202erosnes", `"sensor"`} {
		execSQL(t, schema, `INSERT INTO {{schema}}.series (name, "interval", origin) VALUES ($1, 'PT5M', '2000-01-01T00:00:00Z')`, name)
	}
	r := cli(t, "--schema", schema, "series", "list")
	requireOK(t, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 6, r.stdout)
	for _, want := range []string{`"sensor\u200b"`, `"\u202erosnes"`, `"\"sensor\""`, "\nsensor "} {
		require.Contains(t, r.stdout, want)
	}
	for _, raw := range []string{"\u200b", "\u202e"} {
		require.NotContains(t, r.stdout, raw, "printed raw")
	}
	// Registering such a name is refused, with the character escaped.
	r = cli(t, "--schema", schema, "series", "add", "sensor\u2060", "--interval", "PT5M")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, `"sensor\u2060"`)
	require.Contains(t, r.stderr, "invisible character U+2060")
}

// TestMigrateDownIsGuarded: migrate down dropped every table without a
// prompt. Off a terminal it needs --yes; --dry-run prints the SQL it would
// run and changes nothing.
func TestMigrateDownIsGuarded(t *testing.T) {
	schema := freshSchema(t, "cli_down_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "sensor", "--interval", "PT5M"))
	before := snapshot(t, schema)

	r := cli(t, "--schema", schema, "migrate", "down")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--yes")
	require.Contains(t, r.stderr, "--dry-run")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	require.Equal(t, before, snapshot(t, schema))

	plan := decode[struct {
		DryRun bool   `json:"dry_run"`
		SQL    string `json:"sql"`
	}](t, cli(t, "--schema", schema, "--json", "migrate", "down", "--dry-run"))
	require.True(t, plan.DryRun)
	r = cli(t, "--schema", schema, "migrate", "down", "--dry-run")
	requireOK(t, r)
	require.Contains(t, r.stdout, plan.SQL)
	require.Contains(t, r.stdout, "DROP TABLE IF EXISTS \""+schema+"\".slot;")
	require.Contains(t, r.stdout, "DELETE FROM \""+schema+"\".schema_migrations WHERE version = 1;")
	require.Contains(t, r.stdout, "DROP TABLE \""+schema+"\".schema_migrations;")
	require.Equal(t, before, snapshot(t, schema), "a dry run changes nothing")

	// The dry run's SQL is what down runs: applied by hand, it removes
	// almanac's tables and the schema.
	_, err := pgtest.Pool(t).Exec(context.Background(), r.stdout)
	require.NoError(t, err)
	var exists bool
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists)
	r = cli(t, "--schema", schema, "migrate", "down", "--dry-run")
	requireOK(t, r)
	require.Contains(t, r.stdout, "nothing to undo")
}

func TestMigrateGrants(t *testing.T) {
	r := cliEnv(t, nil, "--schema", "app data", "migrate", "grants", "--runtime", "app", "--migrator", "app_owner")
	requireOK(t, r)
	require.Contains(t, r.stdout, `CREATE SCHEMA IF NOT EXISTS "app data" AUTHORIZATION "app_owner";`)
	require.Contains(t, r.stdout, `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "app data" TO "app";`)
	require.Contains(t, r.stdout, `ALTER DEFAULT PRIVILEGES FOR ROLE "app_owner" IN SCHEMA "app data"`)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "grants", "--migrator", "o"}, "--runtime is required"},
		{[]string{"migrate", "grants", "--runtime", "a"}, "--migrator is required"},
		{[]string{"migrate", "grants", "--runtime", "pg_read_all_data", "--migrator", "o"}, `"pg_read_all_data"`},
		{[]string{"migrate", "grants", "--runtime", "a\x01", "--migrator", "o"}, `"a\x01"`},
		{[]string{"migrate", "grants", "--runtime", "same", "--migrator", "same"}, "two roles"},
	} {
		r := cliEnv(t, nil, tt.args...)
		require.Equal(t, exitUsage, r.code, "%q: %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.want, "%q", tt.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	}
}
