package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// badCase is one command line that must be refused.
type badCase struct {
	args []string
	env  []string // extra environment, KEY=VALUE
	code int      // 2: bad input; 3: the database is the problem
	want string   // a fragment of the one-line error: the bad value
}

// TestBadInputBinary is the bad-input suite: malformed and hostile command
// lines for every command that takes a series, run through the real binary
// against a schema holding a registered series with slots in every state.
// Each must exit 2 (or 3 when the database is the problem: an unmigrated
// schema, an unreachable server) with exactly one line on stderr naming the
// bad value and nothing on stdout, and leave the database exactly as it was.
//
// A NUL cannot be in the suite: execve(2) takes C strings, so no process can
// be started with a NUL in an argument or the environment (see
// TestBadInputNUL for how that is checked, and the NUL names refused in
// process).
func TestBadInputBinary(t *testing.T) {
	t.Parallel() // its own schema
	bin := buildAlmanac(t)
	schema := freshSchema(t, "cli_badinput_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "sensor", "--interval", "PT5M"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "berlin", "--interval", "P1D", "--tz", "Europe/Berlin"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "yearly", "--interval", "P1Y"))
	requireOK(t, cli(t, "--schema", schema, "materialize", "sensor", "--interval", "PT5M",
		"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T02:00:00Z"))
	// Slots a mistaken reopen, retry, skip or materialize would change.
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE slot_start < '2026-03-01T01:00:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET status = 'SKIP', message = 'outage' WHERE slot_start = '2026-03-01T01:00:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = 'infinity', fail_count = 3 WHERE slot_start = '2026-03-01T01:05:00Z'`)
	execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = now() + interval '1 hour', fail_count = 1 WHERE slot_start = '2026-03-01T01:10:00Z'`)
	notExecutable := filepath.Join(t.TempDir(), "report.sh")
	require.NoError(t, os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644))
	badInterpreter := filepath.Join(t.TempDir(), "fill.py")
	require.NoError(t, os.WriteFile(badInterpreter, []byte("#!/usr/bin/pyhton3\n"), 0o755))

	s := func(args ...string) []string { return append([]string{"--schema", schema}, args...) }
	on := func(cmd, name, iv string, extra ...string) []string {
		return s(append([]string{cmd, name, "--interval", iv}, extra...)...)
	}
	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}
	reversed := []string{"--from", "2026-03-02T00:00:00Z", "--to", "2026-03-01T00:00:00Z"}
	century := []string{"--from", "2000-01-01", "--to", "2100-01-01"}
	huge := strings.Repeat("n", 10240)
	injection := []string{
		`almanac"; DROP SCHEMA public CASCADE; --`,
		`x'); DELETE FROM slot; --`,
		`public; SELECT pg_sleep(10)`,
		`' OR 1=1 --`,
		`a" CASCADE; --`,
	}
	bad := func(want string, args ...string) badCase { return badCase{args: args, code: exitUsage, want: want} }
	tests := []badCase{
		// series add: durations, times, zones, names.
		bad(`"P"`, s("series", "add", "x", "--interval", "P")...),
		bad(`"PT"`, s("series", "add", "x", "--interval", "PT")...),
		bad(`"P1.5M"`, s("series", "add", "x", "--interval", "P1.5M")...),
		bad(`"PT-5M"`, s("series", "add", "x", "--interval", "PT-5M")...),
		bad(`"P0D"`, s("series", "add", "x", "--interval", "P0D")...),
		bad(`"5m"`, s("series", "add", "x", "--interval", "5m")...),
		bad(`"2023-02-29"`, s("series", "add", "x", "--interval", "P1D", "--origin", "2023-02-29")...),
		bad(`"2026-01-01T24:00"`, s("series", "add", "x", "--interval", "P1D", "--origin", "2026-01-01T24:00")...),
		bad(`"10000-01-01T00:00:00Z"`, s("series", "add", "x", "--interval", "P1D", "--origin", "10000-01-01T00:00:00Z")...),
		bad(`"Mars/Olympus_Mons"`, s("series", "add", "x", "--interval", "P1D", "--tz", "Mars/Olympus_Mons")...),
		bad(`"Europe/Berlin'; DROP SCHEMA public; --"`, s("series", "add", "x", "--interval", "P1D", "--tz", "Europe/Berlin'; DROP SCHEMA public; --")...),
		bad("10240 bytes", s("series", "add", huge, "--interval", "PT5M")...),
		bad(`"P0D"`, s("series", "add", `x'; DROP TABLE slot; --`, "--interval", "P0D")...),
		bad(`"a\nb"`, s("series", "add", "a\nb", "--interval", "PT5M")...),
		bad("registered with zone Europe/Berlin", s("series", "add", "berlin", "--interval", "P1D", "--tz", "UTC")...),

		// materialize
		bad("reversed", on("materialize", "sensor", "PT5M", reversed...)...),
		bad("--max-slots", on("materialize", "sensor", "PT5M", century...)...),
		bad("raise --max-slots to 288", on("materialize", "sensor", "PT5M", append(day, "--max-slots", "10")...)...),
		bad(`"2023-02-29"`, on("materialize", "sensor", "PT5M", "--from", "2023-02-29", "--to", "2023-03-01")...),
		bad(`"2026-03-01T24:00"`, on("materialize", "sensor", "PT5M", "--from", "2026-03-01", "--to", "2026-03-01T24:00")...),
		bad(`"10000-01-01"`, on("materialize", "sensor", "PT5M", "--from", "2026-03-01", "--to", "10000-01-01")...),
		bad(`"a'b;c"`, on("materialize", "a'b;c", "PT5M", day...)...),
		bad("10240 bytes", on("materialize", huge, "PT5M", day...)...),
		bad(`"P1.5M"`, on("materialize", "sensor", "P1.5M", day...)...),

		// gaps
		bad(`"PT"`, on("gaps", "sensor", "PT", day...)...),
		bad("reversed", on("gaps", "sensor", "PT5M", reversed...)...),
		bad(`"2026-13-01"`, on("gaps", "sensor", "PT5M", "--from", "2026-13-01", "--to", "2026-12-01")...),
		bad(`"x; SELECT pg_sleep(10)"`, on("gaps", "x; SELECT pg_sleep(10)", "PT5M", day...)...),
		bad("raise --max-slots to 288", on("gaps", "sensor", "PT5M", append(day, "--max-slots", "1")...)...),
		bad(`"2026-03-01T00:00:00+25:00"`, on("gaps", "sensor", "PT5M", "--from", "2026-03-01T00:00:00+25:00", "--to", "2026-03-02")...),

		// status
		bad("give both --from and --to, or neither", on("status", "sensor", "PT5M", "--to", "2026-03-01")...),
		bad(`"5m"`, on("status", "sensor", "5m")...),
		bad(`"2026-02-29"`, on("status", "sensor", "PT5M", "--from", "2026-02-29", "--to", "2026-03-01")...),
		bad(`"a\tb"`, on("status", "a\tb", "PT5M")...),
		bad(`"o'brien"`, on("status", "o'brien", "PT5M")...),

		// reopen
		bad(`--states "ACQUIRED"`, on("reopen", "sensor", "PT5M", append(day, "--states", "ACQUIRED")...)...),
		bad("reversed", on("reopen", "sensor", "PT5M", reversed...)...),
		bad(`"P0D"`, on("reopen", "sensor", "P0D", day...)...),
		bad("--max-slots", on("reopen", "sensor", "PT5M", "--from", "2026-03-01T00:00:00Z", "--to", "9999-12-30T00:00:00Z")...),
		bad(`"2026-03-01T00:00:00+01"`, on("reopen", "sensor", "PT5M", "--from", "2026-03-01T00:00:00+01", "--to", "2026-03-02")...),

		// retry
		bad(`"PT-5M"`, on("retry", "sensor", "PT-5M", day...)...),
		bad("--max-slots", on("retry", "sensor", "PT5M", century...)...),
		bad(`"yesterday"`, on("retry", "sensor", "PT5M", "--from", "yesterday", "--to", "2026-03-02")...),
		bad("10240 bytes", on("retry", huge, "PT5M", day...)...),

		// skip: slot texts.
		bad("missing offset", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00/PT5M", "--reason", "r")...),
		bad("is not one PT5M slot after the start", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00:00Z/2026-03-01T00:10:00Z", "--reason", "r")...),
		bad("is not one PT5M slot after the start", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00:00Z/2026-03-01T00:00:00Z", "--reason", "r")...),
		// The DST day in Berlin has 23 hours: the next midnight is +02:00.
		bad("expected 2026-03-30T00:00:00+02:00", on("skip", "berlin", "P1D", "--slot", "2026-03-29T00:00:00+01:00/2026-03-30T00:00:00+01:00", "--reason", "r")...),
		bad("not the series interval", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00:00Z/PT1H", "--reason", "r")...),
		bad("not a slot boundary", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:01:00Z/PT5M", "--reason", "r")...),
		bad(`"10000-01-01T00:00:00Z/PT5M"`, on("skip", "sensor", "PT5M", "--slot", "10000-01-01T00:00:00Z/PT5M", "--reason", "r")...),
		bad(`"2026-02-29T00:00:00Z/PT5M"`, on("skip", "sensor", "PT5M", "--slot", "2026-02-29T00:00:00Z/PT5M", "--reason", "r")...),
		bad(`"2026-03-01T24:00:00Z/PT5M"`, on("skip", "sensor", "PT5M", "--slot", "2026-03-01T24:00:00Z/PT5M", "--reason", "r")...),
		bad(`"garbage"`, on("skip", "sensor", "PT5M", "--slot", "garbage", "--reason", "r")...),
		bad(`invalid interval "P"`, on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00:00Z/P", "--reason", "r")...),
		bad("--reason is required", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00:00Z/PT5M")...),
		bad("--reason is required", on("skip", "sensor", "PT5M", "--slot", "2026-03-01T00:00:00Z/PT5M", "--reason", "   ")...),

		// Reasons: valid UTF-8, no control or invisible characters, 1 KiB.
		bad(`--reason: invalid reason "late\xff": not valid UTF-8`, on("reopen", "sensor", "PT5M", append(day, "--reason", "late\xff")...)...),
		bad(`--reason: invalid reason "late\xff": not valid UTF-8`, on("skip", "sensor", "PT5M", append(day, "--reason", "late\xff")...)...),
		bad("control character U+001B", on("reopen", "sensor", "PT5M", append(day, "--reason", "\x1b[2Jcleared")...)...),
		bad("control character U+000D", on("skip", "sensor", "PT5M", append(day, "--reason", "over\rwritten")...)...),
		bad("invisible character U+202E", on("reopen", "sensor", "PT5M", append(day, "--reason", "\u202egnirob")...)...),
		bad("invisible character U+2028", on("skip", "sensor", "PT5M", append(day, "--reason", "two\u2028lines")...)...),
		bad("1025 bytes; expected at most 1024", on("reopen", "sensor", "PT5M", append(day, "--reason", strings.Repeat("r", 1025))...)...),
		// (One argument is at most 128 KiB: MAX_ARG_STRLEN.)
		bad("100000 bytes; expected at most 1024", on("skip", "sensor", "PT5M", append(day, "--reason", strings.Repeat("r", 100_000))...)...),

		// Intervals, origins and bounds the supported years cannot hold.
		bad(`"P8000Y": too large: longer than P1000Y`, s("series", "add", "x", "--interval", "P8000Y")...),
		bad(`"P1001Y"`, s("series", "add", "x", "--interval", "P1001Y")...),
		bad(`"P365243D"`, s("series", "add", "x", "--interval", "P365243D")...),
		bad(`"P8000Y"`, on("materialize", "sensor", "P8000Y", day...)...),
		bad(`"P8000Y"`, s("run", "x", "--interval", "P8000Y", "--", "true")...),
		bad("origin 9999-06-01T00:00:00Z: its first P1Y slot would end after 9999-12-31T00:00:00Z", s("series", "add", "x", "--interval", "P1Y", "--origin", "9999-06-01")...),
		bad("holds the P1Y slot starting 9999-01-01T00:00:00Z, which would end after 9999-12-31T00:00:00Z", on("materialize", "yearly", "P1Y", "--from", "9990-01-01", "--to", "9999-06-01")...),
		bad("holds the P1Y slot starting 9999-01-01T00:00:00Z", on("gaps", "yearly", "P1Y", "--from", "9990-01-01", "--to", "9999-12-30")...),
		bad("holds the P1D slot starting 9999-12-31T00:00:00+01:00", on("skip", "berlin", "P1D", "--from", "9999-12-01", "--to", "9999-12-31T00:30", "--reason", "r")...),
		bad("holds the P1Y slot starting 9999-01-01T00:00:00Z", s("run", "yearly", "--interval", "P1Y", "--from", "9990-01-01", "--to", "9999-06-01", "--", "true")...),

		// Schedules that never fire.
		bad(`"0 0 30 2 *" never fires`, s("run", "x", "--interval", "PT5M", "--schedule", "0 0 30 2 *", "--", "true")...),
		bad(`"0 0 31 4,6,9,11 *" never fires`, s("run", "x", "--interval", "PT5M", "--schedule", "0 0 31 4,6,9,11 *", "--", "true")...),

		// Dates in the ISO 8601 basic format are refused, saying how to write them.
		bad(`"20260301": ISO 8601 basic format, which almanac does not read; write it as 2026-03-01`, on("gaps", "sensor", "PT5M", "--from", "20260301", "--to", "2026-03-02")...),
		bad("write it as 2026-03-02T06:00", on("materialize", "sensor", "PT5M", "--from", "2026-03-01", "--to", "20260302T0600")...),
		bad("write it as 2026-01-01", s("series", "add", "x", "--interval", "P1D", "--origin", "20260101")...),
		bad("write it as 2026-01-01", s("run", "x", "--interval", "PT5M", "--from", "20260101", "--", "true")...),

		// Names that would print like another name.
		bad(`"sensor\u200b": contains invisible character U+200B`, s("series", "add", "sensor\u200b", "--interval", "PT5M")...),
		bad(`"\u202erosnes"`, s("series", "add", "\u202erosnes", "--interval", "PT5M")...),
		bad(`"sen\u00adsor"`, on("status", "sen\u00adsor", "PT5M")...),
		bad(`"sensor\u2029"`, on("reopen", "sensor\u2029", "PT5M", day...)...),
		bad(`"sensor\ufeff"`, s("run", "sensor\ufeff", "--interval", "PT5M", "--", "true")...),

		// Destructive commands need a confirmation off a terminal.
		bad("pass --yes to confirm, or --dry-run", s("migrate", "down")...),
		bad("pass --yes to confirm, or --dry-run", s("migrate", "down", "--to", "1")...),
		bad("not both", s("migrate", "down", "--yes", "--dry-run")...),
		bad("--to 99: expected a version from 1 to", s("migrate", "up", "--to", "99")...),
		bad("--to 0: expected a version from 1 to", s("migrate", "up", "--to", "0")...),
		bad(`"pg_monitor"`, s("migrate", "grants", "--runtime", "pg_monitor", "--migrator", "owner")...),

		// reopen, skip and retry: free text that cannot be stored.
		bad(`invalid reason "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr…": 2000 bytes; expected at most 1024`, on("reopen", "sensor", "PT5M", append(day, "--reason", strings.Repeat("r", 2000))...)...),
		bad(`--actor: invalid text: actor "ops\tci": contains control character U+0009`, on("reopen", "sensor", "PT5M", append(day, "--actor", "ops\tci")...)...),
		bad("10240 bytes; expected at most 200", on("retry", "sensor", "PT5M", append(day, "--actor", huge)...)...),
		bad(`actor "\xff": not valid UTF-8`, on("skip", "sensor", "PT5M", append(day, "--reason", "r", "--actor", "\xff")...)...),
		bad(`invalid reason "\x1b[31mred": contains control character U+001B`, on("skip", "sensor", "PT5M", append(day, "--reason", "\x1b[31mred")...)...),

		// history
		bad("expects a series NAME and a SLOT, got 1", s("history", "sensor")...),
		bad(`no series is named "nosuch"; register it with almanac series add nosuch --interval P`, s("history", "nosuch", "2026-03-01T00:00:00Z")...),
		bad(`SLOT "2026-03-01T00:00:00Z/PT1H" is a PT1H slot but --interval is PT5M`, s("history", "sensor", "2026-03-01T00:00:00Z/PT1H", "--interval", "PT5M")...),
		bad(`"garbage"`, s("history", "sensor", "garbage", "--interval", "PT5M")...),
		bad(`"2026-02-29"`, s("history", "sensor", "2026-02-29", "--interval", "PT5M")...),
		bad("not a slot boundary", s("history", "sensor", "2026-03-01T00:01:00Z/PT5M")...),
		bad("is not one PT5M slot after the start", s("history", "sensor", "2026-03-01T00:00:00Z/2026-03-01T00:10:00Z", "--interval", "PT5M")...),
		bad(`invalid interval "P"`, s("history", "sensor", "2026-03-01T00:00:00Z/P")...),
		bad(`"5m"`, s("history", "sensor", "2026-03-01T00:00:00Z", "--interval", "5m")...),
		bad(`"nosuch"`, s("history", "nosuch", "2026-03-01T00:00:00Z/PT5M")...),
		bad(`"a\nb"`, s("history", "a\nb", "2026-03-01T00:00:00Z/PT5M")...),
		bad("history --prune takes no arguments, got 1", s("history", "--prune", "sensor")...),
		bad(`--interval "PT5M" does not apply`, s("history", "--prune", "--interval", "PT5M")...),
		bad("--dry-run applies to history --prune only", s("history", "sensor", "2026-03-01T00:00:00Z/PT5M", "--dry-run")...),

		// run: checked before anything is registered or materialized.
		bad(`"P"`, s("run", "x", "--interval", "P", "--", "true")...),
		bad(`"P1.5M"`, s("run", "x", "--interval", "P1.5M", "--", "true")...),
		bad(`"PT-1M"`, s("run", "x", "--interval", "PT5M", "--lag", "PT-1M", "--", "true")...),
		bad(`--timeout "5"`, s("run", "x", "--interval", "PT5M", "--timeout", "5", "--", "true")...),
		bad(`"2023-02-29"`, s("run", "x", "--interval", "PT5M", "--from", "2023-02-29", "--", "true")...),
		bad(`"Mars/Base"`, s("run", "x", "--interval", "PT5M", "--tz", "Mars/Base", "--", "true")...),
		bad("is after --to", s("run", "x", "--interval", "PT5M", "--from", "2026-02-01", "--to", "2026-01-01", "--", "true")...),
		bad("10240 bytes", s("run", huge, "--interval", "PT5M", "--", "true")...),
		bad(`"a\nb"`, s("run", "a\nb", "--interval", "PT5M", "--", "true")...),
		bad("registered with zone Europe/Berlin", s("run", "berlin", "--interval", "P1D", "--tz", "UTC", "--", "true")...),
		// run: new flags and commands that cannot start, refused before
		// the series is registered.
		bad(`--timeout "-1s"`, s("run", "x", "--interval", "PT5M", "--timeout", "-1s", "--", "true")...),
		bad(`--timeout "P1M"`, s("run", "x", "--interval", "PT5M", "--timeout", "P1M", "--", "true")...),
		bad(`--env: invalid environment entry "1X"`, s("run", "x", "--interval", "PT5M", "--env", "1X", "--", "true")...),
		bad(`"=value"`, s("run", "x", "--interval", "PT5M", "--env", "=value", "--", "true")...),
		bad(`"BAD-NAME=1"`, s("run", "x", "--interval", "PT5M", "--env", "BAD-NAME=1", "--", "true")...),
		bad(`"ALMANAC_SLOT=x": ALMANAC_SLOT is set by almanac`, s("run", "x", "--interval", "PT5M", "--env", "ALMANAC_SLOT=x", "--", "true")...),
		bad(`"no-such-command-almanac" not found in PATH`, s("run", "x", "--interval", "PT5M", "--", "no-such-command-almanac")...),
		bad(`"./reprot.sh" does not exist`, s("run", "x", "--interval", "PT5M", "--", "./reprot.sh")...),
		bad(`is a directory`, s("run", "x", "--interval", "PT5M", "--", os.TempDir())...),
		bad(`is not executable`, s("run", "x", "--interval", "PT5M", "--", notExecutable)...),
		bad(`names the interpreter "/usr/bin/pyhton3", which does not exist`, s("run", "x", "--interval", "PT5M", "--", badInterpreter)...),

		// Schema names: quoted as identifiers, so an injection attempt is
		// just a schema that does not exist (exit 3: migrate it first),
		// unless it is too long or holds a control character (exit 2).
		{args: []string{"--schema", injection[0], "series", "add", "x", "--interval", "PT5M"}, code: exitUnavailable, want: "DROP SCHEMA public CASCADE"},
		{args: append([]string{"--schema", injection[1], "materialize", "sensor", "--interval", "PT5M"}, day...), code: exitUnavailable, want: "DELETE FROM slot"},
		{args: append([]string{"--schema", injection[2], "gaps", "sensor", "--interval", "PT5M"}, day...), code: exitUnavailable, want: "SELECT pg_sleep(10)"},
		{args: append([]string{"--schema", injection[3], "reopen", "sensor", "--interval", "PT5M"}, day...), code: exitUnavailable, want: "OR 1=1"},
		{args: []string{"--schema", injection[4], "run", "x", "--interval", "PT5M", "--", "true"}, code: exitUnavailable, want: `CASCADE; --`},
		{args: []string{"status", "sensor", "--interval", "PT5M"}, env: []string{"ALMANAC_SCHEMA=" + injection[0]}, code: exitUnavailable, want: "DROP SCHEMA public CASCADE"},
		bad("bytes", "--schema", `x"; DROP SCHEMA `+schema+` CASCADE; SELECT pg_sleep(10); --`, "retry", "sensor", "--interval", "PT5M", "--from", "2026-03-01", "--to", "2026-03-02"),
		bad(`"a\tb"`, append([]string{"--schema", "a\tb", "skip", "sensor", "--interval", "PT5M", "--reason", "r"}, day...)...),
		// System schemas are refused: nothing of almanac's belongs there.
		bad(`"pg_catalog" is a system schema`, "--schema", "pg_catalog", "series", "list"),
		bad(`"pg_catalog" is a system schema`, "--schema", "pg_catalog", "migrate", "up"),
		bad(`"information_schema" is a system schema`, "--schema", "information_schema", "series", "add", "x", "--interval", "PT5M"),
		bad(`"pg_toast" is a system schema`, "--schema", "pg_toast", "migrate", "down", "--yes"),
		bad(`"pg_mine" is a system schema`, "--schema", "pg_mine", "migrate", "up"),
		{args: []string{"status", "sensor", "--interval", "PT5M"}, env: []string{"ALMANAC_SCHEMA=information_schema"}, code: exitUsage, want: `"information_schema" is a system schema`},

		// The server is the problem.
		{args: on("retry", "sensor", "PT5M", day...), env: []string{"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT=200ms"},
			code: exitUnavailable, want: "cannot reach the database"},
	}
	require.GreaterOrEqual(t, len(tests), 50)

	// Nothing is written: in the test's schema, and no schema the cases
	// name comes into existence.
	others := schemasNamed(tests)
	before := databaseState(t, schema, others)
	for _, tt := range tests {
		// A refusal is immediate; a case that hangs is named, not left to
		// the package's timeout.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, tt.args...)
		cmd.Env = append(cleanEnv("DATABASE_URL="+pgtest.URL(t)), tt.env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		timedOut := ctx.Err()
		cancel()
		require.NoError(t, timedOut, "%q did not exit within a minute; stderr %s", tt.args, stderr.String())
		var exitErr *exec.ExitError
		require.True(t, errors.As(err, &exitErr), "%q: %v; stderr %s", tt.args, err, stderr.String())
		require.Equal(t, tt.code, exitErr.ExitCode(), "%q: stderr %s", tt.args, stderr.String())
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%q: one line: %q", tt.args, stderr.String())
		require.True(t, strings.HasPrefix(stderr.String(), "almanac: "), "%q: %q", tt.args, stderr.String())
		require.Contains(t, stderr.String(), tt.want, "%q", tt.args)
		require.Empty(t, stdout.String(), "%q", tt.args)
	}
	require.Equal(t, before, databaseState(t, schema, others), "nothing was written")
}

// schemasNamed returns the schemas the cases give with --schema or
// ALMANAC_SCHEMA.
func schemasNamed(tests []badCase) []string {
	var out []string
	for _, tt := range tests {
		for i, arg := range tt.args {
			if arg == "--schema" && i+1 < len(tt.args) {
				out = append(out, tt.args[i+1])
			}
		}
		for _, kv := range tt.env {
			if v, ok := strings.CutPrefix(kv, "ALMANAC_SCHEMA="); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// TestBadInputNUL: a NUL cannot reach the binary at all, since execve(2)
// takes C strings; Go refuses to start such a process (EINVAL for an
// argument, an error for the environment, where ALMANAC_SCHEMA and
// DATABASE_URL come from). The same values given to the CLI in process —
// as a library caller could — are refused as bad input naming the value.
func TestBadInputNUL(t *testing.T) {
	bin := buildAlmanac(t)
	err := exec.Command(bin, "series", "add", "a\x00b", "--interval", "PT5M").Run()
	require.ErrorIs(t, err, syscall.EINVAL)
	cmd := exec.Command(bin, "series", "list")
	cmd.Env = cleanEnv("ALMANAC_SCHEMA=a\x00b")
	require.ErrorContains(t, cmd.Run(), "NUL")
	require.Nil(t, cmd.Process, "never started")

	schema := migrated(t)
	before := databaseState(t, schema, nil)
	day := []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}
	for _, args := range [][]string{
		{"series", "add", "a\x00b", "--interval", "PT5M"},
		append([]string{"materialize", "a\x00b", "--interval", "PT5M"}, day...),
		append([]string{"gaps", "a\x00b", "--interval", "PT5M"}, day...),
		{"status", "a\x00b", "--interval", "PT5M"},
		append([]string{"reopen", "a\x00b", "--interval", "PT5M"}, day...),
		append([]string{"retry", "a\x00b", "--interval", "PT5M"}, day...),
		append([]string{"skip", "a\x00b", "--interval", "PT5M", "--reason", "r"}, day...),
		{"run", "a\x00b", "--interval", "PT5M", "--", "true"},
		append([]string{"reopen", "sensor", "--interval", "PT5M", "--reason", "a\x00b"}, day...),

		{"run", "x", "--interval", "PT5M", "--env", "a\x00b", "--", "true"},
		{"run", "x", "--interval", "PT5M", "--", "a\x00b"},
		{"history", "a\x00b", "2026-03-01T00:00:00Z/PT5M"},
		append([]string{"reopen", "sensor", "--interval", "PT5M", "--actor", "a\x00b"}, day...),
		append([]string{"skip", "sensor", "--interval", "PT5M", "--reason", "a\x00b"}, day...),
	} {
		r := cli(t, append([]string{"--schema", schema}, args...)...)
		require.Equal(t, exitUsage, r.code, "%q: %s", args, r.stderr)
		require.Contains(t, r.stderr, `"a\x00b"`, "%q", args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line: %q", args, r.stderr)
	}
	r := cli(t, "--schema", "a\x00b", "series", "list")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, `"a\x00b"`)
	require.Equal(t, before, databaseState(t, schema, nil), "nothing was written")
}

// cleanEnv is this process's environment without the variables that select
// a database or schema, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "ALMANAC_SCHEMA=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// databaseState is everything a command could have written: every row of
// every table and sequence of schema, and which of the schemas others
// exist. It looks at nothing else: other tests and other clients of the
// server create and drop schemas of their own meanwhile.
func databaseState(t *testing.T, schema string, others []string) string {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var b strings.Builder
	var existing []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(nspname ORDER BY nspname), '{}') FROM pg_namespace
		WHERE nspname::text = ANY($1::text[])`, others).Scan(&existing))
	fmt.Fprintf(&b, "schemas named by the cases that exist: %q\n", existing)
	rows, err := pool.Query(ctx, `SELECT c.relname, c.relkind = 'S' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'S') ORDER BY c.relname`, schema)
	require.NoError(t, err)
	type relation struct {
		name     string
		sequence bool
	}
	var rels []relation
	var rel relation
	_, err = pgx.ForEachRow(rows, []any{&rel.name, &rel.sequence}, func() error { rels = append(rels, rel); return nil })
	require.NoError(t, err)
	require.NotEmpty(t, rels)
	for _, rel := range rels {
		name := sqlschema.Quote(schema) + "." + sqlschema.Quote(rel.name)
		sql := `SELECT count(*) || E'\n' || coalesce(string_agg(t::text, E'\n' ORDER BY t::text), '') FROM ` + name + ` t`
		if rel.sequence {
			sql = `SELECT last_value || ' ' || is_called FROM ` + name
		}
		var content string
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&content))
		fmt.Fprintf(&b, "%s:\n%s\n", rel.name, content)
	}
	return b.String()
}
