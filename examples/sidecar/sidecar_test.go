package sidecar_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/almanactest"
)

func TestMain(m *testing.M) { almanactest.Main(m) }

// TestSidecar runs the README's fixed-range command: 31 daily slots, 31
// report files, every slot COMPLETE.
func TestSidecar(t *testing.T) {
	schema := almanactest.Schema(t)
	client := almanactest.Client(t, almanac.Options{Schema: schema}) // migrates the schema
	bin := filepath.Join(t.TempDir(), "almanac")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/almanac")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	reports := t.TempDir()
	script, err := filepath.Abs("report.sh")
	require.NoError(t, err)
	cmd := exec.Command(bin, "--schema", schema, "run", "nightly", "--interval", "P1D", "--tz", "Europe/Berlin", "--env", "REPORT_DIR",
		"--from", "2026-01-01", "--to", "2026-02-01", "--once", "--", script)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+almanactest.URL(t), "REPORT_DIR="+reports)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "[nightly 2026-01-01T00:00:00+01:00/P1D] wrote ")

	files, err := filepath.Glob(filepath.Join(reports, "*.txt"))
	require.NoError(t, err)
	require.Len(t, files, 31)
	first, err := os.ReadFile(filepath.Join(reports, "2026-01-01T00-00-00+01-00.txt"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(first), "slot=2026-01-01T00:00:00+01:00/P1D attempt=1 fence="))
	var complete int
	require.NoError(t, almanactest.Pool(t).QueryRow(context.Background(),
		`SELECT count(*) FROM `+schema+`.slot WHERE status = 'COMPLETE'`).Scan(&complete))
	require.Equal(t, 31, complete)
	nightly, err := client.LookupSeries(context.Background(), "nightly", "P1D")
	require.NoError(t, err)
	last := time.Date(2026, 1, 31, 0, 0, 0, 0, nightly.Series.Location())
	almanactest.RequireStatus(t, client, nightly.Series, last, almanac.StatusComplete)
	almanactest.RequireStatus(t, client, nightly.Series, last.AddDate(0, 0, 1), almanactest.Missing)
}
