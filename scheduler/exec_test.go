package scheduler

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/redact"
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
	return runCommandIn(context.Background(), t, db, cmd)
}

// runCommandIn is runCommand with the handler's context made from ctx,
// which may carry the passwords of the scheduler's connections
// (redact.WithPasswords) as almanac's engine gives them.
func runCommandIn(ctx context.Context, t *testing.T, db *pgtest.DB, cmd Command) acquire.Outcome {
	t.Helper()
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
	return envIn(context.Background(), t, cmd)
}

// envIn is envOf with the handler's context made from ctx.
func envIn(ctx context.Context, t *testing.T, cmd Command) map[string]string {
	t.Helper()
	db := pgtest.New(t)
	out := filepath.Join(t.TempDir(), "env")
	cmd.Path = writeScript(t, `env > "`+out+`"`)
	require.Equal(t, acquire.Completed, runCommandIn(ctx, t, db, cmd))
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
	// Connection strings and the connection's password under other names.
	t.Setenv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
	t.Setenv("REPORTS_DSN", "PostgreSQL://reports@db/reports")
	t.Setenv("JDBC_URL", "jdbc:postgresql://db/prod?user=app")
	t.Setenv("LIBPQ_CONN", "host=db dbname=prod user=app")
	t.Setenv("DB_PASS", "conn-pw")
	t.Setenv("HINT", "the postgres host is db; its password is in the vault")
	dbSecrets := []string{"TEST_DATABASE_URL", "REPORTS_DSN", "JDBC_URL", "LIBPQ_CONN", "DB_PASS"}

	env := envOf(t, Command{})
	require.Equal(t, os.Getenv("PATH"), env["PATH"])
	require.Equal(t, "C", env["LC_TIME"])
	require.Equal(t, "Europe/Berlin", env["TZ"])
	require.Equal(t, "2026-01-01T00:00:00Z/PT1M", env["ALMANAC_SLOT"])
	require.Equal(t, env["ALMANAC_NAME"], env["ALMANAC_SERIES"], "the series, under both names")
	require.NotEmpty(t, env["ALMANAC_SERIES"])
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

	// The scheduler connects with the password "conn-pw" and gives it to
	// its lease handlers (almanac's TestCommandGetsNoConnectionPassword).
	ctx := redact.WithPasswords(context.Background(), []string{"conn-pw"})
	env = envIn(ctx, t, Command{EnvAll: true, Env: []string{"PGHOST", "LIBPQ_CONN"}})
	require.Equal(t, "/srv/reports", env["REPORT_DIR"])
	require.Equal(t, "k3y", env["AWS_SECRET_ACCESS_KEY"])
	require.Equal(t, "db", env["PGHOST"])
	require.Equal(t, "host=db dbname=prod user=app", env["LIBPQ_CONN"], "named, a secret passes")
	require.Equal(t, "the postgres host is db; its password is in the vault", env["HINT"])
	for _, name := range append([]string{"DATABASE_URL", "ALMANAC_DATABASE_URL", "ALMANAC_LISTEN_URL", "PGPASSWORD"}, dbSecrets[:3]...) {
		require.NotContains(t, env, name)
	}
	require.NotContains(t, env, "DB_PASS", "it holds the connection's password")
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
	for _, entry := range []string{"", "=x", "1X", "A-B=1", "ALMANAC_SLOT=x", "ALMANAC_FENCE", "ALMANAC_SERIES=x", "A=\x00"} {
		err := Command{Path: "sh", Env: []string{entry}}.Check()
		require.ErrorIs(t, err, errBadEnv, "%q", entry)
		require.ErrorContains(t, err, `"`+strings.ReplaceAll(entry, "\x00", `\x00`)+`"`)
	}
}

// TestCommandTimeout: a hung command is stopped at its timeout, with its
// stderr, and the run is a failure. The timeout leaves a busy machine time
// to start the shell and write the line, and the grace time to reap a
// process that SIGTERM ends at once (else the message says "killed").
func TestCommandTimeout(t *testing.T) {
	db := pgtest.New(t)
	script := writeScript(t, `echo "stuck on the network" >&2; sleep 60`)
	began := time.Now()
	outcome := runCommand(t, db, Command{Path: script, Timeout: 2 * time.Second, Grace: 20 * time.Second})
	require.Equal(t, acquire.Failed, outcome)
	require.Less(t, time.Since(began), 30*time.Second, "not the minute of sleep")
	var message string
	require.NoError(t, db.Pool.QueryRow(context.Background(), sqlschema.Render(`SELECT message FROM {{schema}}.slot WHERE fail_count = 1`, db.Schema)).Scan(&message))
	require.Equal(t, "timed out after 2s (command stopped: signal: terminated): stuck on the network", message)
}

// TestStderrRedactedAcrossBoundaries: a URL whose password is split by the
// 64 KiB at which an unfinished line is passed on, or by the start of the
// kept tail, is redacted in the failure message and in the copied output
// wherever the boundary falls.
func TestStderrRedactedAcrossBoundaries(t *testing.T) {
	const password = "s3cr3tPW"
	url := "postgres://app:" + password + "@db/prod"
	// leaks reports a piece of the password of three bytes or more in s.
	leaks := func(s string) string {
		for i := 0; i+3 <= len(password); i++ {
			for j := i + 3; j <= len(password); j++ {
				if strings.Contains(s, password[i:j]) {
					return password[i:j]
				}
			}
		}
		return ""
	}
	run := func(writes ...string) (message, output string) {
		var out strings.Builder
		var mu sync.Mutex
		tail := &tailBuffer{max: stderrTail}
		lw := &lineWriter{w: &out, mu: &mu, tail: tail}
		for _, w := range writes {
			_, err := lw.Write([]byte(w))
			require.NoError(t, err)
		}
		lw.flush()
		return tail.suffix(), out.String()
	}
	// The boundaries fall around and inside the user information.
	for k := len("postgres://"); k < len(url)-len("db/prod"); k++ {
		// The first write ends k bytes into the URL and takes the
		// unfinished line past maxLine: it is passed on there.
		first := strings.Repeat("x", maxLine-k) + " " + url[:k]
		message, output := run(first, url[k:]+" failed\n")
		require.Empty(t, leaks(message), "boundary %d: %q", k, message)
		require.True(t, strings.HasSuffix(message, "postgres://app:REDACTED@db/prod failed"), "boundary %d: %q", k, message)
		require.Empty(t, leaks(output), "boundary %d", k)
		require.Contains(t, output, "postgres://app:REDACTED@db/prod failed\n", "boundary %d", k)

		// The message keeps the last stderrTail bytes: the k-th byte of the
		// URL is the first of them.
		after := " failed " + strings.Repeat("y", stderrTail-(len(url)-k)-len(" failed ")-1) + "\n"
		message, output = run(strings.Repeat("z", 100) + " " + url + after)
		require.Empty(t, leaks(message), "window start %d: %q", k, message)
		require.Empty(t, leaks(output), "window start %d", k)

		// A line of URLs far longer than what is kept, in writes of an odd
		// size: the kept bytes begin inside one of them (at a few offsets:
		// redacting long lines is slow under the race detector).
		if k%5 != 0 {
			continue
		}
		long := strings.Repeat("w", k) + strings.Repeat(url+" ", 4000) + "\n"
		var writes []string
		for rest := long; rest != ""; rest = rest[min(len(rest), 4093):] {
			writes = append(writes, rest[:min(len(rest), 4093)])
		}
		message, output = run(writes...)
		require.Empty(t, leaks(message), "offset %d: %q", k, message)
		require.Contains(t, message, "postgres://app:REDACTED@db/prod postgres://app:REDACTED@db/prod", "offset %d", k)
		require.Empty(t, leaks(output), "offset %d", k)
	}
}

func TestPieceEnd(t *testing.T) {
	for line, want := range map[string]string{
		"aaa bbb":                      "aaa ",
		"aaa  postgres://app:s3cr3t":   "aaa  ",
		"aaa password = s3cr3t":        "aaa ",
		"aaa DB_PASSWORD: s3cr3t":      "aaa ",
		"aaa bbb \t":                   "aaa ",
		"nothing-to-cut-between-words": "nothing-to-cut-between-words",
		" leading":                     " leading",
	} {
		require.Equal(t, want, line[:pieceEnd([]byte(line))], "%q", line)
	}
}
