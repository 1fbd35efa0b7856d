package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/bench"
	"github.com/almanacdev/almanac/internal/pgtest"
)

// envRunAsCLI makes the test binary act as the almanac command line: the
// bench's memory scenario runs almanac as a subprocess, and in tests the
// only almanac binary at hand is this one.
const envRunAsCLI = "ALMANAC_TEST_RUN_AS_CLI"

func init() {
	if os.Getenv(envRunAsCLI) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
	}
}

// quickRows are the rows of a quick run, in order.
var quickRows = []string{
	"locked", "batch-vs-river", "batch-vs-raw", "lease-vs-river", "gaps-complete", "gaps-holes", "materialize", "wake-median", "wake-p99",
	"scaling-locked-1", "scaling-locked-2", "scaling-locked-4", "scaling-locked-8", "scaling-locked-16",
	"scaling-lease-1", "scaling-lease-2", "scaling-lease-4", "scaling-lease-8", "scaling-lease-16",
	"scaling-gaps-1k", "scaling-gaps-5k", "scaling-gaps-20k",
	"memory-gaps", "memory-run",
}

// TestBenchQuick runs the whole suite in its quick mode, as CI does so the
// bench cannot rot: every row must be there and measured. The figures are
// not checked; they mean nothing at these sizes. River's rows may be
// skipped, with the reason logged, where bench/river cannot be built (no
// go command, or River neither in the module cache nor downloadable).
func TestBenchQuick(t *testing.T) {
	t.Setenv(envRunAsCLI, "1") // for the subprocesses only: init has run
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	env := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	code := run(ctx, []string{"bench", "--quick", "--repeats", "2", "--json"}, &out, &errOut, func(k string) string { return env[k] })
	require.Equal(t, 0, code, "stderr: %s", errOut.String())

	var rep bench.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.True(t, rep.Quick)
	require.Equal(t, 2, rep.Repeats)
	require.NotEmpty(t, rep.Server)
	var ids []string
	for _, r := range rep.Rows {
		ids = append(ids, r.ID)
		if r.Result == bench.Skipped {
			mayBeSkipped := strings.HasSuffix(r.ID, "-vs-river") || strings.HasPrefix(r.ID, "memory-") && runtime.GOOS != "linux"
			require.True(t, mayBeSkipped, "row %s skipped: %s", r.ID, r.Note)
			require.NotEmpty(t, r.Note, "row %s is skipped without a reason", r.ID)
			t.Logf("row %s skipped: %s", r.ID, r.Note)
			if strings.HasSuffix(r.ID, "-vs-river") {
				require.Len(t, r.Engine.Samples, rep.Repeats, "row %s: almanac is measured even without River", r.ID)
			}
			continue
		}
		require.Equal(t, bench.Info, r.Result, "row %s: a quick run judges nothing", r.ID)
		require.Len(t, r.Engine.Samples, rep.Repeats, "row %s", r.ID)
		require.Len(t, r.Baseline.Samples, rep.Repeats, "row %s", r.ID)
		require.Positive(t, r.Engine.Value, "row %s", r.ID)
		require.Positive(t, r.Baseline.Value, "row %s", r.ID)
		require.Positive(t, r.Ratio, "row %s", r.ID)
	}
	require.Equal(t, quickRows, ids)
}

func TestBenchTable(t *testing.T) {
	r := cli(t, "bench", "--quick", "--scenarios", "gaps,materialize", "--repeats", "1")
	requireOK(t, r)
	require.Contains(t, r.stdout, "scenario")
	require.Contains(t, r.stdout, "gaps over 20k slots, complete")
	require.Contains(t, r.stdout, "materialize 20k slots into an empty series")
	require.Contains(t, r.stdout, "≤ 1.20×")
	require.NotContains(t, r.stdout, "locked", "only the selected scenarios run")
}

func TestBenchBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--scenarios", "locked,nope"},
		{"bench", "--repeats", "0"},
		{"bench", "--workers", "0"},
		{"bench", "--workers", "33"},
		{"bench", "extra"},
	} {
		r := cli(t, args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%v: one line: %s", args, r.stderr)
	}
	r := cliEnv(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT": "200ms"}, "bench", "--quick")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
}

func TestBenchHelpListsScenarios(t *testing.T) {
	r := cliEnv(t, nil, "bench", "--help")
	requireOK(t, r)
	for _, s := range bench.Scenarios() {
		require.True(t, slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(line string) bool {
			return strings.HasPrefix(strings.TrimSpace(line), s.ID+" ")
		}), "help lists %s", s.ID)
	}
}
