//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/testkit/proc"
)

// TestRunOnceThreeProcesses: three `almanac run --once` over the same 200
// slots: every slot COMPLETE, every slot's command ran exactly once.
func TestRunOnceThreeProcesses(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	out := filepath.Join(t.TempDir(), "ran")
	job := script(t, `echo "$ALMANAC_SLOT" >> "`+out+`"`)
	args := []string{"--schema", schema, "run", "report", "--interval", "PT1M",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:20:00Z", "--workers", "4", "--once", "--", job}
	var procs []*process
	for range 3 {
		procs = append(procs, start(t, bin, args...))
	}
	for _, p := range procs {
		require.Equal(t, 0, p.wait(t, time.Minute), "stderr: %s", p.stderr)
	}
	require.Equal(t, 200, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	lines, err := os.ReadFile(out)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, l := range strings.Fields(string(lines)) {
		seen[l]++
	}
	require.Len(t, seen, 200)
	for slot, n := range seen {
		require.Equal(t, 1, n, "%s ran %d times", slot, n)
	}
}

// TestRunRetriesSkipsAndCompletes: a command that fails twice then
// succeeds, and one that exits with the skip code.
func TestRunRetriesSkipsAndCompletes(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	job := script(t, `
n=$(cat "`+dir+`/count-$ALMANAC_SLOT_START" 2>/dev/null || echo 0)
n=$((n+1)); echo $n > "`+dir+`/count-$ALMANAC_SLOT_START"
echo "attempt $ALMANAC_ATTEMPT fence $ALMANAC_FENCE"
case "$ALMANAC_SLOT_START" in
  *T00:00:00Z) exit 99 ;;
esac
if [ "$n" -lt 3 ]; then echo "not yet ($n)" >&2; exit 1; fi
`)
	p := start(t, bin, "--schema", schema, "run", "flaky", "--interval", "PT1M",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z", "--", job)
	waitFor(t, "the flaky slot to complete after its retries", 30*time.Second, func() bool {
		return dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) == 1
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second))
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'SKIP' AND slot_start = '2026-01-01T00:00:00Z'`))
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot
		WHERE status = 'COMPLETE' AND slot_start = '2026-01-01T00:01:00Z' AND attempts = 3 AND fail_count = 0`))
	require.Contains(t, p.stdout.String(), "[flaky 2026-01-01T00:01:00Z/PT1M] attempt 3 fence ")
	require.Contains(t, p.stderr.String(), "not yet (2)")
	require.Contains(t, p.stderr.String(), "outcome=fail")
}

// TestRunSIGTERMMidSlot: SIGTERM while a command runs: almanac exits 0
// within the grace period, and the slot is later completed exactly once.
func TestRunSIGTERMMidSlot(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	job := script(t, `
echo start >> "`+dir+`/log"
if [ ! -e "`+dir+`/second" ]; then touch "`+dir+`/second"; sleep 60; fi
echo done >> "`+dir+`/log"
`)
	span := []string{"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z"}
	p := start(t, bin, append(append([]string{"--schema", schema, "run", "long", "--interval", "PT1M", "--grace", "1s"}, span...), "--", job)...)
	waitFor(t, "the command to start", 20*time.Second, func() bool { _, err := os.Stat(dir + "/second"); return err == nil })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	began := time.Now()
	require.Equal(t, 0, p.wait(t, 20*time.Second), "stderr: %s", p.stderr)
	require.Less(t, time.Since(began), 10*time.Second)
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE' AND owner IS NULL AND fail_count = 0`),
		"the slot was released, not failed")

	again := start(t, bin, append(append([]string{"--schema", schema, "run", "long", "--interval", "PT1M", "--once"}, span...), "--", job)...)
	require.Equal(t, 0, again.wait(t, 30*time.Second), "stderr: %s", again.stderr)
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	log, err := os.ReadFile(dir + "/log")
	require.NoError(t, err)
	require.Equal(t, "start\nstart\ndone\n", string(log), "completed exactly once")
}

// TestRunTakeoverKillsStaleChild: a process frozen past its lease loses the
// slot to another; when it resumes, its command is killed.
func TestRunTakeoverKillsStaleChild(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	job := script(t, `
if [ "$ALMANAC_ATTEMPT" = 1 ]; then echo $$ > "`+dir+`/first"; sleep 60; fi
echo "took over: attempt $ALMANAC_ATTEMPT" >> "`+dir+`/second"
`)
	span := []string{"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z"}
	a := start(t, bin, append(append([]string{"--schema", schema, "run", "frozen", "--interval", "PT1M", "--lease-ttl", "1s", "--grace", "1s"}, span...), "--", job)...)
	childPID := readPIDs(t, dir+"/first")[0]

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP)) // no more heartbeats
	// The lease expires, past any takeover grace.
	_, err := pgtest.Pool(t).Exec(context.Background(),
		sqlschema.Render(`UPDATE {{schema}}.slot SET lease_until = clock_timestamp() - interval '1 minute' WHERE status = 'ACQUIRED'`, schema))
	require.NoError(t, err)
	b := start(t, bin, append(append([]string{"--schema", schema, "run", "frozen", "--interval", "PT1M", "--once"}, span...), "--", job)...)
	require.Equal(t, 0, b.wait(t, 30*time.Second), "stderr: %s", b.stderr)
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	require.NoError(t, proc.WaitExit(childPID, 20*time.Second), "the stale command is killed")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, a.wait(t, 20*time.Second))
	require.Contains(t, a.stderr.String(), "lease lost")
	second, err := os.ReadFile(dir + "/second")
	require.NoError(t, err)
	require.Equal(t, "took over: attempt 2\n", string(second))
	require.Equal(t, 1, dbCount(t, schema, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND attempts = 2`))
}

func TestRunBadInput(t *testing.T) {
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "berlin", "--interval", "P1D", "--tz", "Europe/Berlin"))
	before := snapshot(t, schema)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "x", "--interval", "PT5M"}, "expects NAME, then --"},
		{[]string{"run", "x", "--interval", "PT5M", "--"}, "expects NAME, then --"},
		{[]string{"run", "--interval", "PT5M", "--", "true"}, "expects NAME, then --"},
		{[]string{"run", "x", "--", "true"}, "--interval is required"},
		{[]string{"run", "x", "--interval", "P0D", "--", "true"}, `"P0D"`},
		{[]string{"run", "x", "--interval", "PT5M", "--lag", "5 minutes", "--", "true"}, `"5 minutes"`},
		{[]string{"run", "x", "--interval", "PT5M", "--lag", "P1D", "--", "true"}, "calendar part"},
		{[]string{"run", "x", "--interval", "PT5M", "--schedule", "61 * * * *", "--", "true"}, `"61 * * * *"`},
		{[]string{"run", "x", "--interval", "PT5M", "--schedule", "@every 0s", "--", "true"}, `"@every 0s"`},
		{[]string{"run", "x", "--interval", "PT5M", "--catch-up", "some", "--", "true"}, `"some"`},
		{[]string{"run", "x", "--interval", "PT5M", "--workers", "0", "--", "true"}, "--workers 0"},
		{[]string{"run", "x", "--interval", "PT5M", "--skip-exit-code", "256", "--", "true"}, "--skip-exit-code 256"},
		{[]string{"run", "x", "--interval", "PT5M", "--from", "2023-02-29", "--", "true"}, `"2023-02-29"`},
		{[]string{"run", "x", "--interval", "PT5M", "--tz", "Mars/Base", "--", "true"}, `"Mars/Base"`},
		{[]string{"run", "x", "--interval", "PT5M", "--lease-ttl", "10ms", "--", "true"}, "--lease-ttl"},
		{[]string{"run", "x", "--interval", "PT5M", "--from", "2026-02-01", "--to", "2026-01-01", "--", "true"}, "is after --to"},
		{[]string{"run", "berlin", "--interval", "P1D", "--tz", "UTC", "--", "true"}, "registered with zone Europe/Berlin"},
		{[]string{"run", "x", "berlin", "--interval", "P1D", "--tz", "UTC", "--", "true"}, "registered with zone Europe/Berlin"},
		{[]string{"run", "x", "--like", "x%", "--interval", "PT5M", "--", "true"}, "not several"},
		{[]string{"run", "--all", "--series", "x", "--interval", "PT5M", "--", "true"}, "not several"},
		{[]string{"run", "x", "--series", "x", "--interval", "PT5M", "--", "true"}, "given twice"},
		{[]string{"run", "--like", `x\`, "--interval", "PT5M", "--", "true"}, "ends with the escape character"},
		{[]string{"run", "--all", "--tz", "UTC", "--interval", "PT5M", "--", "true"}, "--tz and --origin"},
		{[]string{"run", "--all", "--refresh", "0s", "--interval", "PT5M", "--", "true"}, `--refresh "0s"`},
		{[]string{"run", "--all", "--", "true"}, "--interval is required"},
		{[]string{"run", "--like", "nothing%", "--interval", "PT5M", "--from", "2026-02-01", "--to", "2026-01-01", "--", "true"}, "is after --to"},
		{[]string{"run", "--series", "", "--interval", "PT5M", "--", "true"}, "name"},
	} {
		r := cli(t, append([]string{"--schema", schema}, tt.args...)...)
		require.Equal(t, 2, r.code, "%q: %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.want, "%q", tt.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	require.Equal(t, before, snapshot(t, schema), "nothing was written")
}

// TestRunSecondSignal: a second SIGTERM exits at once (130) and kills the
// running command rather than leaving it behind unsupervised.
func TestRunSecondSignal(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	job := script(t, `echo $$ > "`+dir+`/pid"; sleep 60`)
	p := start(t, bin, "--schema", schema, "run", "stuck", "--interval", "PT1M", "--grace", "30s",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "--", job)
	childPID := readPIDs(t, dir+"/pid")[0]
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// The first starts a graceful stop, waiting up to --grace; two signals
	// sent at once could be delivered as one.
	waitFor(t, "the graceful stop", 20*time.Second, func() bool { return strings.Contains(p.stderrSoFar(), "stopping gracefully") })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 130, p.wait(t, 5*time.Second))
	require.Contains(t, p.stderr.String(), "second terminated")
	require.NoError(t, proc.WaitExit(childPID, 5*time.Second), "the command is killed")
}
