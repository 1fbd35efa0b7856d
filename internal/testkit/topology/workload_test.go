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
// and that every slot ran to its end exactly once: one sidecar run that
// ended, or one committed run of another worker (its fencing tokens listed
// in extra, by slot text). A sidecar run stopped by SIGTERM is an attempt
// its sidecar gave up when it could not renew the lease (a failover's pause
// in writes outlasting the lease on a busy machine): lease mode allows it,
// provided a later holder, with a larger fencing token, finished the slot.
func (w *workload) check(extra map[string][]int64) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := w.completed(ctx)
	require.NoError(w.t, err)
	require.Equal(w.t, w.slots, n, "COMPLETE slots")
	gaps, err := w.client.Gaps(ctx, w.grid, rangeFrom, w.to())
	require.NoError(w.t, err)
	require.Empty(w.t, gaps)

	type attempt struct {
		fence    int64
		finished bool
		text     string
	}
	bySlot := map[string][]attempt{}
	runs := readRuns(w.t, w.runs)
	stopped, others := 0, 0
	for _, r := range runs {
		if r.how == "term" {
			stopped++
		}
		bySlot[r.slot] = append(bySlot[r.slot], attempt{r.fence, r.how == "end",
			fmt.Sprintf("sidecar run fence %d pid %d %.2f-%.2f %s", r.fence, r.pid, r.start, r.end, r.how)})
	}
	for slot, fences := range extra {
		for _, fence := range fences {
			others++
			bySlot[slot] = append(bySlot[slot], attempt{fence, true, fmt.Sprintf("library run fence %d", fence)})
		}
	}
	var missed, wrong []string
	for i := range w.slots {
		slot := rangeFrom.Add(time.Duration(i)*time.Minute).Format(time.RFC3339) + "/PT1M"
		got := bySlot[slot]
		var finished []attempt
		for _, a := range got {
			if a.finished {
				finished = append(finished, a)
			}
		}
		texts := make([]string, len(got))
		for j, a := range got {
			texts[j] = a.text
		}
		switch {
		case len(finished) == 0:
			missed = append(missed, slot)
		case len(finished) > 1:
			wrong = append(wrong, fmt.Sprintf("%s ran to its end %d times: %s", slot, len(finished), strings.Join(texts, "; ")))
		default:
			for _, a := range got {
				if !a.finished && a.fence >= finished[0].fence {
					wrong = append(wrong, fmt.Sprintf("%s: an unfinished run is not older than the finished one: %s", slot, strings.Join(texts, "; ")))
					break
				}
			}
		}
	}
	w.t.Logf("%d slots: %d sidecar runs (%d stopped when their lease could not be renewed), %d library runs, %d missed, %d wrong", w.slots, len(runs), stopped, others, len(missed), len(wrong))
	if len(missed) > 0 || len(wrong) > 0 {
		w.t.Errorf("%d slots never ran to their end: %v\n%d slots ran wrongly:\n%s", len(missed), missed, len(wrong), strings.Join(wrong, "\n"))
	}
}
