//go:build linux

package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/proc"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestRunSidecarKilled: SIGKILL the sidecar while its command runs; the
// command, its child and a grandchild that left the process group are
// gone within a second, and a second sidecar then runs the slot exactly
// once.
func TestRunSidecarKilled(t *testing.T) {
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	job := script(t, `
echo "start $ALMANAC_ATTEMPT" >> "`+dir+`/runs"
if [ "$ALMANAC_ATTEMPT" = 1 ]; then
  sleep 60 & child=$!
  setsid sleep 60 & escaped=$!
  echo "$$ $child $escaped" > "`+dir+`/pids"
  wait
fi
echo "done $ALMANAC_ATTEMPT" >> "`+dir+`/runs"
`)
	span := []string{"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z"}
	a := start(t, bin, append(append([]string{"--schema", schema, "run", "killed", "--interval", "PT1M", "--lease-ttl", "1s"}, span...), "--", job)...)
	pids := readPIDs(t, dir+"/pids")
	require.Len(t, pids, 3)
	for _, pid := range pids {
		require.True(t, proc.Alive(pid), "pid %d runs", pid)
	}

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	a.wait(t, 20*time.Second)
	deadline := time.Now().Add(time.Second)
	for _, pid := range pids {
		require.NoError(t, proc.WaitExit(pid, time.Until(deadline)), "a second after the sidecar was killed")
	}

	// The killed sidecar's lease runs out (expired here, past any takeover
	// grace, rather than waited for), and another takes the slot over.
	_, err := pgtest.Pool(t).Exec(context.Background(),
		sqlschema.Render(`UPDATE {{schema}}.slot SET lease_until = clock_timestamp() - interval '1 minute' WHERE status = 'ACQUIRED'`, schema))
	require.NoError(t, err)
	b := start(t, bin, append(append([]string{"--schema", schema, "run", "killed", "--interval", "PT1M", "--once"}, span...), "--", job)...)
	require.Equal(t, 0, b.wait(t, 30*time.Second), "stderr: %s", b.stderr)
	runs, err := os.ReadFile(dir + "/runs")
	require.NoError(t, err)
	require.Equal(t, "start 1\nstart 2\ndone 2\n", string(runs), "the first run never went on; the second ran once")
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND attempts = 2`))
}

// TestRunFailureAlwaysRecorded: a command whose stderr holds NUL bytes,
// invalid UTF-8 and a multi-byte character cut by the kept tail fails its
// slot like any other: recorded, and --once exits 1.
func TestRunFailureAlwaysRecorded(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	// "€" is 3 bytes; 3071 bytes follow it, so the kept 3 KiB start on its
	// second byte.
	job := script(t, `
printf 'nul \000\000 and invalid \377\376\300 utf-8\n' >&2
printf '€' >&2
head -c 3070 /dev/zero | tr '\0' 'z' >&2
printf '\n' >&2
exit 1
`)
	// --max-attempts 1: the first failure parks the slot, so --once does
	// not wait for retries.
	p := start(t, bin, "--schema", schema, "run", "binary", "--interval", "PT1M", "--max-attempts", "1",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--once", "--", job)
	require.Equal(t, 1, p.wait(t, 30*time.Second), "stderr: %.2000s", p.stderr)
	require.Contains(t, p.stderr.String(), "almanac: 1 slot left unfinished")
	var message string
	var failCount int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), sqlschema.Render(
		`SELECT message, fail_count FROM {{schema}}.slot WHERE status = 'AVAILABLE'`, schema)).Scan(&message, &failCount))
	require.Equal(t, 1, failCount)
	require.True(t, utf8.ValidString(message), "%q", message)
	require.NotContains(t, message, "\x00")
	require.True(t, strings.HasPrefix(message, "gave up after 1 failure: "+job+": exit status 1: "), "%q", message)
	require.True(t, strings.HasSuffix(message, strings.Repeat("z", 3070)), "the end of stderr is kept")
}

// TestRunFromToBoundsWhatRuns: with --from and --to, --once runs the slots
// starting in [from, to) and leaves older open slots alone.
func TestRunFromToBoundsWhatRuns(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "bounded", "--interval", "PT1M"))
	requireOK(t, cli(t, "--schema", schema, "materialize", "bounded", "--interval", "PT1M",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T01:00:00Z"))
	ran := t.TempDir() + "/ran"
	job := script(t, `echo "$ALMANAC_SLOT_START" >> "`+ran+`"`)
	p := start(t, bin, "--schema", schema, "run", "bounded", "--interval", "PT1M",
		"--from", "2026-01-01T01:00:00Z", "--to", "2026-01-01T01:03:00Z", "--once", "--", job)
	require.Equal(t, 0, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	lines, err := os.ReadFile(ran)
	require.NoError(t, err)
	require.Equal(t, "2026-01-01T01:00:00Z\n2026-01-01T01:01:00Z\n2026-01-01T01:02:00Z\n", sortedLines(string(lines)))
	require.Equal(t, 60, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot
		WHERE slot_start < '2026-01-01T01:00:00Z' AND status = 'AVAILABLE' AND attempts = 0`), "older open slots untouched")
}

func sortedLines(s string) string {
	lines := strings.Fields(s)
	for i := range lines {
		for j := i + 1; j < len(lines); j++ {
			if lines[j] < lines[i] {
				lines[i], lines[j] = lines[j], lines[i]
			}
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestRunKeepsSecrets: the database URL's password reaches neither the
// command's environment (not even with --env-all) nor, when the command
// prints a password anyway, the stored message or the log.
func TestRunKeepsSecrets(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	// The connection's password and another connection string, under
	// names that say nothing, too.
	env := []string{"DATABASE_URL=" + withPassword(t, "s3cret"), "PGPASSWORD=s3cret", "REPORT_DIR=/srv/reports", "COPY=s3cret", "REPORTS=postgres://reports@db/reports"}
	dir := t.TempDir()
	job := script(t, `env > "`+dir+`/env"
echo "connecting to postgres://app:s3cret@db/prod" >&2
exit 1
`)
	for _, extra := range [][]string{nil, {"--env-all"}} {
		args := append([]string{"--schema", schema, "run", "secret", "--interval", "PT1M",
			"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--once", "--env", "REPORT_DIR"}, extra...)
		p := startEnv(t, env, bin, append(args, "--", job)...)
		require.Equal(t, 1, p.wait(t, 30*time.Second), "stderr: %.2000s", p.stderr)
		require.NotContains(t, p.stderr.String(), "s3cret")
		require.Contains(t, p.stderr.String(), "postgres://app:REDACTED@db/prod")
		childEnv, err := os.ReadFile(dir + "/env")
		require.NoError(t, err)
		require.NotContains(t, string(childEnv), "s3cret", "%s", extra)
		require.NotContains(t, string(childEnv), "DATABASE_URL", "%s", extra)
		require.NotContains(t, string(childEnv), "postgres://", "%s", extra)
		require.Contains(t, string(childEnv), "REPORT_DIR=/srv/reports\n")
		require.Contains(t, string(childEnv), "ALMANAC_SLOT=2026-01-01T00:00:00Z/PT1M\n")
		require.Equal(t, 0, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE message LIKE '%s3cret%'`))
		require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE message LIKE '%postgres://app:REDACTED@db/prod'`))
		execSQL(t, schema, `UPDATE {{schema}}.slot SET not_before = NULL`) // due again for the next round
	}
}

// TestRunTimeoutDefault: --timeout has a limit by default, and says why.
func TestRunTimeoutDefault(t *testing.T) {
	t.Parallel() // its own schema and processes
	r := cliEnv(t, nil, "run", "--help")
	requireOK(t, r)
	require.Contains(t, r.stdout, `would hold its slot for ever (0: no limit) (default "1h")`)
}
