package scheduler

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/supervisor"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// runCommand runs cmd once for the PT1M slot at 2026-01-01T00:00Z, under
// its lease as almanac's lease workers run a handler, and returns the
// outcome recorded.
func runCommand(t *testing.T, db *pgtest.DB, cmd Command) acquire.Outcome {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grid := series(t, "cmd", "PT1M")
	_, _, err := seriesdb.Add(ctx, db.Pool, db.Schema, grid)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end) VALUES ($1, $2, $3, $4)`, db.Schema),
		grid.Name(), grid.Interval().String(), start, start.Add(time.Minute))
	require.NoError(t, err)
	q, err := acquire.New(ctx, db.Pool, grid, acquire.Options{Schema: db.Schema,
		Policy: acquire.Policy{Retry: func(int, error) (time.Duration, bool) { return time.Hour, true }}})
	require.NoError(t, err)
	leases, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	stop := q.KeepAlive(ctx, leases)
	defer stop()
	lctx, cancel := leases[0].Context(ctx)
	defer cancel()
	outcome, _, err := leases[0].Finish(ctx, cmd.LeaseHandler()(lctx, leases[0]))
	require.NoError(t, err)
	return outcome
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

// envOf runs a command that writes its environment to a file and returns
// it as a map.
func envOf(t *testing.T, cmd Command) map[string]string {
	t.Helper()
	db := pgtest.New(t) // before the test's DATABASE_URL, which leads nowhere
	out := filepath.Join(t.TempDir(), "env")
	cmd.Path = writeScript(t, `env > "`+out+`"`)
	require.Equal(t, acquire.Completed, runCommand(t, db, cmd))
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	return env
}

// TestCommandEnvironment: by default the command gets the minimal
// environment and the slot, never the database secrets; --env names and
// sets variables, secrets included; EnvAll passes all but the secrets.
func TestCommandEnvironment(t *testing.T) {
	pgtest.URL(t) // found before the test's DATABASE_URL, which leads nowhere
	t.Setenv("DATABASE_URL", "postgres://app:s3cret@db/prod")
	t.Setenv("ALMANAC_DATABASE_URL", "postgres://app:s3cret@db/prod")
	t.Setenv("ALMANAC_LISTEN_URL", "postgres://app:s3cret@db/prod")
	t.Setenv("PGPASSWORD", "s3cret")
	t.Setenv("PGHOST", "db")
	t.Setenv("LC_TIME", "C")
	t.Setenv("TZ", "Europe/Berlin")
	t.Setenv("REPORT_DIR", "/srv/reports")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "k3y")

	env := envOf(t, Command{})
	require.Equal(t, os.Getenv("PATH"), env["PATH"])
	require.Equal(t, "C", env["LC_TIME"])
	require.Equal(t, "Europe/Berlin", env["TZ"])
	require.Equal(t, "2026-01-01T00:00:00Z/PT1M", env["ALMANAC_SLOT"])
	require.Equal(t, "1", env["ALMANAC_ATTEMPT"])
	require.NotEmpty(t, env["ALMANAC_FENCE"])
	for _, name := range []string{"DATABASE_URL", "ALMANAC_DATABASE_URL", "ALMANAC_LISTEN_URL", "PGPASSWORD", "PGHOST", "REPORT_DIR", "AWS_SECRET_ACCESS_KEY", "ALMANAC_SUPERVISOR"} {
		require.NotContains(t, env, name)
	}

	env = envOf(t, Command{Env: []string{"REPORT_DIR", "PGPASSWORD", "MODE=full", "UNSET_NAME", "TZ=UTC"}})
	require.Equal(t, "/srv/reports", env["REPORT_DIR"])
	require.Equal(t, "s3cret", env["PGPASSWORD"], "named, a secret passes")
	require.Equal(t, "full", env["MODE"])
	require.Equal(t, "UTC", env["TZ"], "Env wins over the passed value")
	require.NotContains(t, env, "UNSET_NAME")
	require.NotContains(t, env, "DATABASE_URL")

	env = envOf(t, Command{EnvAll: true, Env: []string{"PGHOST"}})
	require.Equal(t, "/srv/reports", env["REPORT_DIR"])
	require.Equal(t, "k3y", env["AWS_SECRET_ACCESS_KEY"])
	require.Equal(t, "db", env["PGHOST"])
	for _, name := range []string{"DATABASE_URL", "ALMANAC_DATABASE_URL", "ALMANAC_LISTEN_URL", "PGPASSWORD"} {
		require.NotContains(t, env, name)
	}
}

// TestCommandFailureIsStorable: stderr with NUL bytes, invalid UTF-8, a
// password and a multi-byte character cut by the tail's window is stored as
// the failure, valid and without the password.
func TestCommandFailureIsStorable(t *testing.T) {
	db := pgtest.New(t)
	// 3071 bytes after "é" (2 bytes): the 3072-byte window starts on its
	// second byte.
	script := writeScript(t, `printf 'connect postgres://app:s3cret@db/prod\n'
printf 'bad \000 nul and \377\376 bytes\n' >&2
printf 'PGPASSWORD=s3cret\n' >&2
printf 'é' >&2
head -c 3070 /dev/zero | tr '\0' 'x' >&2
printf '\n' >&2
exit 1
`)
	var stdout, stderr strings.Builder
	outcome := runCommand(t, db, Command{Path: script, Stdout: &stdout, Stderr: &stderr})
	require.Equal(t, acquire.Failed, outcome)
	var message string
	var failCount int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT message, fail_count FROM `+db.Schema+`.slot`).Scan(&message, &failCount))
	require.Equal(t, 1, failCount)
	require.True(t, utf8.ValidString(message))
	require.NotContains(t, message, "\x00")
	require.NotContains(t, message, "s3cret")
	require.True(t, strings.HasPrefix(message, script+": exit status 1: "), message)
	require.True(t, strings.HasSuffix(message, strings.Repeat("x", 3070)), "the end of stderr is kept")
	require.Less(t, len(message), 4096)
	require.Contains(t, stdout.String(), "postgres://app:REDACTED@db/prod")
	require.Contains(t, stderr.String(), "PGPASSWORD=REDACTED")
	require.NotContains(t, stdout.String()+stderr.String(), "s3cret")
}

func TestCommandCheck(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.sh")
	require.NoError(t, os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644))
	badInterp := filepath.Join(dir, "typo.py")
	require.NoError(t, os.WriteFile(badInterp, []byte("#!/usr/bin/pyhton3\n"), 0o755))
	good := filepath.Join(dir, "good.sh")
	require.NoError(t, os.WriteFile(good, []byte("#!/bin/sh\n"), 0o755))

	require.NoError(t, Command{Path: "sh"}.Check())
	require.NoError(t, Command{Path: good}.Check())
	require.NoError(t, Command{Path: "./good.sh", Dir: dir}.Check(), "relative to Dir")
	require.NoError(t, Command{Path: "good.sh", Env: []string{"PATH=" + dir}}.Check(), "in the command's PATH")
	for _, tt := range []struct {
		cmd  Command
		want string
	}{
		{Command{Path: "no-such-program-here"}, `"no-such-program-here" not found in PATH`},
		{Command{Path: "./good.sh"}, `"./good.sh" does not exist`},
		{Command{Path: dir}, "is a directory"},
		{Command{Path: plain}, "is not executable"},
		{Command{Path: badInterp}, `names the interpreter "/usr/bin/pyhton3", which does not exist`},
		{Command{Path: "good.sh", Env: []string{"PATH=/nonexistent"}}, `not found in PATH "/nonexistent"`},
	} {
		err := tt.cmd.Check()
		require.ErrorIs(t, err, supervisor.ErrCannotStart, "%+v", tt.cmd)
		require.ErrorContains(t, err, tt.want)
	}
	for _, entry := range []string{"", "=x", "1X", "A-B=1", "ALMANAC_SLOT=x", "ALMANAC_FENCE", "A=\x00"} {
		err := Command{Path: "sh", Env: []string{entry}}.Check()
		require.ErrorIs(t, err, errBadEnv, "%q", entry)
		require.ErrorContains(t, err, `"`+strings.ReplaceAll(entry, "\x00", `\x00`)+`"`)
	}
}

// TestCommandTimeout: a hung command is stopped at its timeout, with its
// stderr, and the run is a failure.
func TestCommandTimeout(t *testing.T) {
	db := pgtest.New(t)
	script := writeScript(t, `echo "stuck on the network" >&2; sleep 60`)
	began := time.Now()
	outcome := runCommand(t, db, Command{Path: script, Timeout: 500 * time.Millisecond, Grace: 100 * time.Millisecond})
	require.Equal(t, acquire.Failed, outcome)
	require.Less(t, time.Since(began), 30*time.Second, "not the minute of sleep")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot
		WHERE fail_count = 1 AND message = 'timed out after 500ms (command stopped: signal: terminated): stuck on the network'`))
}
