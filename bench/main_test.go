package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/bench/suite"
)

// TestMain lets the test binary stand in for the bench's binary when a
// scenario starts it again as a child process (series-scale).
func TestMain(m *testing.M) {
	if suite.IsChild() {
		os.Exit(suite.RunChild(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// databaseURL is the database the tests benchmark: TEST_DATABASE_URL, else
// DATABASE_URL, else the local test server.
func databaseURL() string {
	for _, k := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

func getenv(k string) string {
	if k == "DATABASE_URL" {
		return databaseURL()
	}
	return ""
}

// buildAlmanac builds almanac's command line from the parent module, for
// the memory scenario.
func buildAlmanac(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "almanac")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/almanac")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/almanac: %s", out)
	return bin
}

// jsonLines decodes the kinds and rows of a --json run.
type jsonLine struct {
	Kind string `json:"kind"`
	suite.Row
	Interrupted bool `json:"interrupted"`
}

func decode(t *testing.T, out string) []jsonLine {
	t.Helper()
	var lines []jsonLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l jsonLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		lines = append(lines, l)
	}
	return lines
}

// quickRows are the rows of a quick run, in order.
var quickRows = []string{
	"locked", "batch-vs-river", "batch-vs-raw", "lease-vs-river", "fleet-2", "fleet-4", "fleet-lease-2", "fleet-lease-4",
	"gaps-complete", "gaps-complete-naive", "gaps-holes", "gaps-holes-naive", "materialize", "wake-median", "wake-p99",
	"scaling-locked-1", "scaling-locked-4", "scaling-locked-16", "scaling-lease-1", "scaling-lease-4", "scaling-lease-16",
	"scaling-gaps-1k", "scaling-gaps-5k", "memory-gaps", "memory-run",
	"series-scale-start-200", "series-scale-register-200", "series-scale-startcall-200", "series-scale-tx-200",
	"series-scale-cores-200", "series-scale-rss-200", "series-scale-mem-200", "series-scale-p50-200", "series-scale-p99-200",
}

// TestQuick runs the whole suite in its quick mode, as CI does so the bench
// cannot rot: every row must be there, measured (every throughput side
// counted exactly once), with its pgbench ceiling where it has one, and the
// charts written. The figures are not checked; they mean nothing at these
// sizes. (series-scale, opt-in in a full run, runs in a quick one: its
// start-up is measured once per side, the rest once per boundary, and its
// figures can be 0, which has no ratio.)
func TestQuick(t *testing.T) {
	if _, err := exec.LookPath("pgbench"); err != nil {
		t.Fatal("pgbench is needed for the ceilings: apt-get install -y postgresql-client-15")
	}
	bin := buildAlmanac(t)
	charts := t.TempDir()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--quick", "--repeats", "2", "--workers", "4", "--json", "--almanac", bin, "--svg", charts}, &out, &errOut, getenv)
	require.Equal(t, exitOK, code, "stderr: %s", errOut.String())

	lines := decode(t, out.String())
	require.Equal(t, "end", lines[len(lines)-1].Kind)
	var ids []string
	for _, l := range lines[:len(lines)-1] {
		require.Equal(t, "row", l.Kind)
		r := l.Row
		ids = append(ids, r.ID)
		require.Equal(t, suite.Info, r.Result, "row %s: a quick run judges nothing (%s)", r.ID, r.Note)
		requireAligned(t, r.Line())
		if r.Scenario == "series-scale" {
			samples := 2
			if slices.Contains([]string{"start", "register", "startcall"}, strings.Split(r.ID, "-")[2]) {
				samples = 1
			}
			require.Len(t, r.Engine.Samples, samples, "row %s: %s", r.ID, r.Note)
			require.Len(t, r.Baseline.Samples, samples, "row %s: %s", r.ID, r.Note)
			continue
		}
		require.Len(t, r.Engine.Samples, 2, "row %s", r.ID)
		require.Len(t, r.Baseline.Samples, 2, "row %s", r.ID)
		require.Positive(t, r.Ratio, "row %s", r.ID)
		if r.Scenario == "locked" || r.Scenario == "batch" || r.Scenario == "lease" {
			require.NotNil(t, r.Ceiling, "row %s has its pgbench ceiling: %s", r.ID, r.Note)
			require.Len(t, r.Ceiling.Samples, 2, "row %s", r.ID)
		}
	}
	require.Equal(t, quickRows, ids)
	for _, name := range []string{"throughput.svg", "times.svg", "series-scale.svg"} {
		b, err := os.ReadFile(filepath.Join(charts, name))
		require.NoError(t, err)
		requireXML(t, b)
	}
}

// requireAligned checks that a streamed row's last column (its result)
// starts where the header's does, so that no column of the row is wider
// than Line allows.
func requireAligned(t *testing.T, line string) {
	t.Helper()
	header := suite.HeaderLine()
	want := utf8.RuneCountInString(header[:strings.LastIndex(header, "result")])
	last := strings.LastIndex(line, " ") + 1
	require.Equal(t, want, utf8.RuneCountInString(line[:last]), "a column is too wide for the streamed rows:\n%s\n%s", header, line)
}

func requireXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		require.NoError(t, err, string(b))
	}
}

// TestSustainedQuick runs the sustained scenario for a few seconds on its
// own cluster, reported every second.
func TestSustainedQuick(t *testing.T) {
	charts := t.TempDir()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--sustained", "4s", "--period", "1s", "--quick", "--workers", "4", "--json", "--svg", charts,
		"--server-setting", "max_wal_size=2GB", "--server-setting", `cluster_name=it's a\b`}, &out, &errOut, getenv)
	require.Equal(t, exitOK, code, "stderr: %s", errOut.String())
	var periods int
	var rep suite.SustainedReport
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var kind struct{ Kind string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &kind))
		switch kind.Kind {
		case "period":
			var p suite.Period
			require.NoError(t, json.Unmarshal(sc.Bytes(), &p))
			require.Positive(t, p.SlotBytes)
			require.Positive(t, p.WALPerSlot, "every slot run writes WAL")
			require.GreaterOrEqual(t, p.Checkpoints, int64(0))
			require.GreaterOrEqual(t, p.PageImagesPerSlot, 0.0)
			require.True(t, p.EmptyBatches >= 0 && p.EmptyBatches <= 1, "a share: %v", p.EmptyBatches)
			periods++
		case "sustained":
			require.NoError(t, json.Unmarshal(sc.Bytes(), &rep))
		}
	}
	require.GreaterOrEqual(t, periods, 3)
	require.Equal(t, []string{"max_wal_size=2GB", `cluster_name=it's a\b`}, rep.Settings, "the settings as the server reads them")
	require.True(t, rep.ExactlyOnce)
	require.Positive(t, rep.Runs)
	require.Equal(t, rep.Runs, rep.Reopened, "every re-opened slot ran once, and nothing else")
	b, err := os.ReadFile(filepath.Join(charts, "sustained.svg"))
	require.NoError(t, err)
	requireXML(t, b)
}

// cancelOnRow is stdout that cancels the run once the first row is
// printed, as a SIGINT would.
type cancelOnRow struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnRow) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(`"kind":"row"`)) {
		w.cancel()
	}
	return w.buf.Write(p)
}

// TestInterruptedKeepsRows: an interrupted run prints the rows it measured
// and says it was interrupted.
func TestInterruptedKeepsRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &cancelOnRow{cancel: cancel}
	var errOut bytes.Buffer
	code := run(ctx, []string{"--quick", "--repeats", "1", "--json", "--scenarios", "gaps,materialize"}, w, &errOut, getenv)
	require.Equal(t, exitInterrupted, code, "stderr: %s", errOut.String())
	lines := decode(t, w.buf.String())
	require.Equal(t, "gaps-complete", lines[0].ID)
	last := lines[len(lines)-1]
	require.Equal(t, "end", last.Kind)
	require.True(t, last.Interrupted)
	require.Contains(t, errOut.String(), "interrupted")
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenarios", "locked,nope"},
		{"--repeats", "0"},
		{"--workers", "0"},
		{"--workers", "33"},
		{"--period", "0s"},
		{"--hold-snapshot", "--sustained", "1m"},
		{"--server-setting", "max_wal_size=8GB"},
		{"--sustained", "1m", "--server-setting", "max_wal_size"},
		{"--sustained", "1m", "--server-setting", "max wal size=8GB"},
		{"--sustained", "1m", "--server-setting", "port=5433"},
		{"--sustained", "1m", "--server-setting", "cluster_name=a\nb"},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut, getenv)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut.String())
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "%v: one line: %s", args, errOut.String())
	}
	// A setting the server itself refuses, named by the server's reason.
	for _, setting := range []string{"max_wal_size=banana", "no_such_parameter=1"} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"--sustained", "1s", "--quick", "--server-setting", setting}, &out, &errOut, getenv)
		require.Equal(t, exitUsage, code, "%s: %s", setting, errOut.String())
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "%s: one line: %s", setting, errOut.String())
		name, _, _ := strings.Cut(setting, "=")
		require.Contains(t, errOut.String(), `parameter "`+name+`"`)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--quick"}, &out, &errOut, func(string) string {
		return "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"
	})
	require.Equal(t, exitUnavailable, code, errOut.String())
}

// TestHoldSnapshot: with a snapshot held for the whole run the scenarios
// still count every slot once, and the report says the snapshot was held.
func TestHoldSnapshot(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--quick", "--repeats", "1", "--workers", "2", "--json", "--scenarios", "lease", "--hold-snapshot"}, &out, &errOut, getenv)
	require.Equal(t, exitOK, code, "stderr: %s", errOut.String())
	lines := decode(t, out.String())
	require.Equal(t, "lease-vs-river", lines[0].ID)
	require.Equal(t, "end", lines[len(lines)-1].Kind)
	require.Contains(t, out.String(), "held its snapshot open")
}

// TestOptInScenario: materialize-10m runs only when named (quick: 100k
// slots).
func TestOptInScenario(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--quick", "--repeats", "1", "--json", "--scenarios", "materialize-10m"}, &out, &errOut, getenv)
	require.Equal(t, exitOK, code, "stderr: %s", errOut.String())
	lines := decode(t, out.String())
	require.Len(t, lines, 2)
	require.Equal(t, "materialize-10m", lines[0].ID)
	require.Equal(t, "materialize 100k slots into an empty series", lines[0].Name)
}
