//go:build linux

package topology

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// workload is one PT1M series of slots in [rangeFrom, rangeFrom+slots
// minutes) on a server that the test disturbs, worked by sidecars whose
// runs are recorded in a file.
type workload struct {
	t      *testing.T
	url    string
	schema string
	series string
	slots  int
	runs   string
	admin  *pgxpool.Pool
	grid   almanac.Series
	client *almanac.Client
}

// newWorkload migrates schema on url, registers the series and
// materializes its slots.
func newWorkload(t *testing.T, url, schema, series string, slots int) *workload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &workload{t: t, url: url, schema: schema, series: series, slots: slots, runs: runsFile(t)}
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	w.admin, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(w.admin.Close)
	w.client, err = almanac.New(w.admin, almanac.Options{Schema: schema})
	require.NoError(t, err)
	_, err = w.client.Migrate(ctx)
	require.NoError(t, err)
	w.grid, err = w.client.Series(ctx, series, "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	res, err := w.client.Materialize(ctx, w.grid, rangeFrom, w.to(), almanac.WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, slots, res.Inserted)
	return w
}

func (w *workload) to() time.Time { return rangeFrom.Add(time.Duration(w.slots) * time.Minute) }

// table returns a table of the workload's schema, quoted.
func (w *workload) table(name string) string {
	return sqlschema.Render("{{schema}}."+sqlschema.Quote(name), w.schema)
}

// sidecar starts `almanac run` on the series over url, with the recorder
// working seconds per slot; flags come before the command.
func (w *workload) sidecar(name, url string, seconds float64, flags ...string) *sidecar {
	return w.startSidecar(name, url, recordCommand(w.runs, seconds), flags)
}

// pacedSidecar starts `almanac run` like sidecar, with the recorder working
// as long as setPace last said.
func (w *workload) pacedSidecar(name, url string, flags ...string) *sidecar {
	return w.startSidecar(name, url, pacedCommand(w.runs, w.paceFile()), flags)
}

func (w *workload) startSidecar(name, url string, command, flags []string) *sidecar {
	args := []string{"--database-url", url, "--schema", w.schema, "run", w.series, "--interval", "PT1M",
		"--from", rangeFrom.Format(time.RFC3339), "--to", w.to().Format(time.RFC3339)}
	args = append(append(args, flags...), "--")
	return startSidecar(w.t, name, append(args, command...)...)
}

func (w *workload) paceFile() string { return w.runs + ".pace" }

// setPace sets how long the paced sidecars' runs that start from now on
// work: a test slows the work down while it waits for a server, so that
// work is left when the next fault comes.
func (w *workload) setPace(d time.Duration) {
	w.t.Helper()
	tmp := w.paceFile() + ".tmp"
	require.NoError(w.t, os.WriteFile(tmp, []byte(strconv.FormatFloat(d.Seconds(), 'f', -1, 64)+"\n"), 0o644))
	require.NoError(w.t, os.Rename(tmp, w.paceFile()))
}

// completed counts the COMPLETE slots, retrying while the server is away
// (a failover, a restart) until ctx is done.
func (w *workload) completed(ctx context.Context) (int, error) {
	for {
		var n int
		err := w.admin.QueryRow(ctx, `SELECT count(*) FROM `+w.table("slot")+` WHERE name = $1 AND status = 'COMPLETE'`, w.series).Scan(&n)
		if err == nil {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, errors.Join(ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitCompleted waits until at least n slots are COMPLETE, failing after
// limit or when a sidecar exits.
func (w *workload) waitCompleted(n int, limit time.Duration, sidecars ...*sidecar) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		got, err := w.completed(ctx)
		if err != nil {
			w.t.Fatalf("waiting for %d complete slots: %v (runs so far: %d)\n%s", n, err, len(readRuns(w.t, w.runs)), w.diagnose())
		}
		if got >= n {
			return
		}
		for _, s := range sidecars {
			if s.exited() {
				w.t.Fatalf("waiting for %d complete slots (%d so far): sidecar %s exited: %v\n%s", n, got, s.name, s.err, s.out)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstStartAfter waits for a run (recorded, or among more()'s start
// times) that starts after at (on the recorder's clock) and returns how long
// after at it started, failing after limit.
func (w *workload) firstStartAfter(at float64, limit time.Duration, more func() []float64) time.Duration {
	w.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		first := 0.0
		starts := more()
		for _, r := range readRuns(w.t, w.runs) {
			starts = append(starts, r.start)
		}
		for _, s := range starts {
			if s > at && (first == 0 || s < first) {
				first = s
			}
		}
		if first != 0 {
			return time.Duration((first - at) * float64(time.Second))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		done, err := w.completed(ctx)
		cancel()
		if err == nil && done == w.slots {
			w.t.Fatalf("every slot was done before work could resume: the test must leave more work")
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no run started within %s\n%s", limit, w.diagnose())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// diagnose describes the slots by status and the server's sessions, for a
// test that waited in vain.
func (w *workload) diagnose() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	rows, err := w.admin.Query(ctx, `SELECT status, count(*), count(*) FILTER (WHERE lease_until < clock_timestamp()) FROM `+w.table("slot")+` GROUP BY status`)
	if err == nil {
		var status string
		var n, expired int
		_, err = pgx.ForEachRow(rows, []any{&status, &n, &expired}, func() error {
			fmt.Fprintf(&b, "slots %s: %d (lease expired: %d)\n", status, n, expired)
			return nil
		})
	}
	if err != nil {
		fmt.Fprintf(&b, "slot counts: %v\n", err)
	}
	rows, err = w.admin.Query(ctx, `SELECT pid, coalesce(application_name, ''), coalesce(client_port, 0), coalesce(state, ''),
		coalesce(wait_event_type || ':' || wait_event, ''), coalesce(now() - xact_start, '0'), left(query, 80)
		FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err == nil {
		var pid, port int
		var app, state, wait, query string
		var age time.Duration
		_, err = pgx.ForEachRow(rows, []any{&pid, &app, &port, &state, &wait, &age, &query}, func() error {
			fmt.Fprintf(&b, "session %d %s port %d: %s %s xact %s: %s\n", pid, app, port, state, wait, age.Round(time.Millisecond), query)
			return nil
		})
	}
	if err != nil {
		fmt.Fprintf(&b, "sessions: %v\n", err)
	}
	return b.String()
}

// check asserts that every slot is COMPLETE, that gap detection agrees,
// and that every slot ran exactly once: its runs (recorded by sidecars)
// plus other, committed runs counted in extra (by slot text).
func (w *workload) check(extra map[string]int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := w.completed(ctx)
	require.NoError(w.t, err)
	require.Equal(w.t, w.slots, n, "COMPLETE slots")
	gaps, err := w.client.Gaps(ctx, w.grid, rangeFrom, w.to())
	require.NoError(w.t, err)
	require.Empty(w.t, gaps)

	runs := readRuns(w.t, w.runs)
	bySlot := map[string][]string{}
	for _, r := range runs {
		bySlot[r.slot] = append(bySlot[r.slot], fmt.Sprintf("sidecar run fence %d pid %d %.2f-%.2f %s", r.fence, r.pid, r.start, r.end, r.how))
	}
	for slot, k := range extra {
		for range k {
			bySlot[slot] = append(bySlot[slot], "library run")
		}
	}
	var missed, twice []string
	for i := range w.slots {
		slot := rangeFrom.Add(time.Duration(i)*time.Minute).Format(time.RFC3339) + "/PT1M"
		switch got := bySlot[slot]; {
		case len(got) == 0:
			missed = append(missed, slot)
		case len(got) > 1:
			twice = append(twice, fmt.Sprintf("%s ran %d times: %s", slot, len(got), strings.Join(got, "; ")))
		}
	}
	w.t.Logf("%d slots: %d sidecar runs, %d library runs, %d missed, %d run more than once", w.slots, len(runs), sum(extra), len(missed), len(twice))
	if len(missed) > 0 || len(twice) > 0 {
		w.t.Errorf("%d slots never ran: %v\n%d slots ran more than once:\n%s", len(missed), missed, len(twice), strings.Join(twice, "\n"))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
