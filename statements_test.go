package almanac_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestEveryStatementIsScopedToOneSeries records, through a pgx tracer on
// the pool's connections, every SQL statement the engine sends during a
// workload that uses every feature (series registration, materialize,
// gaps, status, heatmaps, failed slots, re-open, skip, retry, locked,
// batched and lease-mode runs with heartbeats, checkpoints, failures,
// parking and an ejection), and
// checks what docs/scaling.md promises for distributing the slot table by
// series name (Citus): every statement that reads or writes the slot table
// is a single-series router query. That is, the statement constrains
// name and "interval" by equality to one parameter each, and the values
// bound to them name one registered series (an INSERT takes them as
// constants of its SELECT list instead). Statements that touch no slot row
// (the series table, transaction control, settings, NOTIFY and LISTEN) are
// listed by kind; a statement of an unknown kind (an advisory lock, which
// any role may take) fails the test, so a new one is looked at before it
// ships.
func TestEveryStatementIsScopedToOneSeries(t *testing.T) {
	db := pgtest.New(t) // migrated by the harness: Migrate is not recorded
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := &statementRecorder{}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 10
	cfg.ConnConfig.Tracer = rec
	acquire.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	runStatementWorkload(ctx, t, pool, db.Schema)
	pool.Close()

	series := rec.seriesNames()
	require.NotEmpty(t, series)
	kinds := map[string]int{}
	// Fragments of the statements the workload must have sent, so that it
	// keeps covering them: a fencing token, skip-locked acquisition, an
	// ejection, a checkpoint, a skip.
	markers := map[string]bool{"nextval(": false, "SKIP LOCKED": false, "NOWAIT": false, "data = $6": false, "'SKIP'": false}
	var problems []string
	// The slot ranges of migration 003 and the frontier of migration 007
	// are keyed by series like the slots, and distributed with them.
	slotTable := regexp.QuoteMeta(sqlschema.Quote(db.Schema)) + `\.slot(?:_stored|_compacted|_frontier)?\b`
	touchesSlot := regexp.MustCompile(slotTable)
	for _, st := range rec.all() {
		kind, err := classify(st, touchesSlot, series)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%v:\n%s", err, st.sql))
			continue
		}
		kinds[kind]++
		for marker := range markers {
			if strings.HasPrefix(kind, "slot") && strings.Contains(st.sql, marker) {
				markers[marker] = true
			}
		}
	}
	var summary strings.Builder
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		fmt.Fprintf(&summary, "  %-28s %d\n", k, kinds[k])
	}
	t.Logf("statements by kind:\n%s", summary.String())
	require.Empty(t, problems, "statements that are not single-series router queries")
	for marker, seen := range markers {
		require.True(t, seen, "no slot statement with %q recorded: the workload no longer covers it", marker)
	}
	require.Positive(t, kinds["slot: single series"], "no slot statement recorded")
	require.Positive(t, kinds["slot: insert of one series"], "no materialization recorded")
	for _, k := range []string{"notify", "listen"} {
		require.Positive(t, kinds[k], "no %s recorded: the workload no longer covers it", k)
	}
}

// runStatementWorkload uses every engine feature on pool.
func runStatementWorkload(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	client, err := almanac.New(pool, almanac.Options{Schema: schema, Concurrency: 4, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(20 * time.Minute)
	var grids []almanac.Series
	for _, name := range []string{"locked", "batch", "lease"} {
		grid, err := client.Series(ctx, "st_"+name, "PT1M", almanac.SeriesOptions{})
		require.NoError(t, err)
		grids = append(grids, grid)
	}
	daily, err := client.Series(ctx, "st_daily", "P1D", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	_, err = client.Materialize(ctx, grids[0], from, to, almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = client.Materialize(ctx, daily, from, from.AddDate(0, 1, 0), almanac.WriteOptions{})
	require.NoError(t, err)
	// Compaction of finished slots, and a re-open that brings them back.
	_, err = client.Skip(ctx, daily, from, from.AddDate(0, 0, 3), almanac.WriteOptions{Reason: "statement test"})
	require.NoError(t, err)
	_, err = client.Compact(ctx, from.AddDate(0, 0, 3), almanac.WriteOptions{}, daily)
	require.NoError(t, err)
	_, err = client.Reopen(ctx, daily, from, from.AddDate(0, 0, 1), almanac.WriteOptions{Reason: "statement test"})
	require.NoError(t, err)

	// One slot fails and is parked at once, one is skipped by its handler,
	// one snoozes; a lease handler checkpoints and outlives a heartbeat.
	var mu sync.Mutex
	snoozed := false
	locked := func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
		switch s.Start.Minute() {
		case 3:
			return errors.New("statement test: fails")
		case 4:
			return almanac.Skip("statement test")
		case 5:
			mu.Lock()
			defer mu.Unlock()
			if !snoozed {
				snoozed = true
				return almanac.Snooze(10 * time.Millisecond)
			}
		}
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	}
	jobs := []almanac.Job{
		{Series: grids[0], From: from, To: to, Handler: locked, Policy: almanac.Policy{MaxAttempts: 1, DeadMan: time.Second}},
		{Series: grids[1], From: from, To: to, Batch: 5, Handler: locked, Policy: almanac.Policy{MaxAttempts: 1, DeadMan: time.Second}},
		{Series: grids[2], From: from, To: to, Policy: almanac.Policy{MaxAttempts: 1, LeaseTTL: time.Second},
			LeaseHandler: func(ctx context.Context, l *acquire.Lease) error {
				if err := l.Checkpoint(ctx, map[string]int{"step": 1}); err != nil {
					return err
				}
				if l.Slot.Start.Minute() == 0 {
					// Outlive a heartbeat: wait until one has renewed the lease.
					claimed := l.Until()
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					for l.Until().Equal(claimed) {
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-tick.C:
						}
					}
				}
				return nil
			}},
	}
	for _, j := range jobs {
		require.NoError(t, client.Register(j))
	}
	require.NoError(t, client.Start(ctx))
	waitDone := func(what string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, g := range grids {
				st, err := client.Status(ctx, g, from, to)
				require.NoError(c, err)
				n := st.Counts
				require.LessOrEqual(c, n.Available-n.Parked+n.Acquired+n.Backoff, int64(0), "%s: open slots", g.Name())
				require.Zero(c, st.Missing, "%s: missing slots", g.Name())
			}
		}, time.Minute, 50*time.Millisecond, "workload: %s not done within a minute", what)
	}
	waitDone("first pass")
	for _, g := range grids {
		_, err := client.Gaps(ctx, g, from, to.Add(time.Hour))
		require.NoError(t, err)
		_, err = client.Heatmap(ctx, g, from, to.Add(time.Hour), 10)
		require.NoError(t, err)
		_, _, err = client.Failures(ctx, almanac.FailuresOptions{Name: g.Name(), Interval: g.Interval().String(), From: from, To: to, Limit: 10, Latest: true})
		require.NoError(t, err)
		_, err = client.Retry(ctx, g, from, to, almanac.WriteOptions{}) // un-parks the failed slot; it fails and parks again
		require.NoError(t, err)
		_, err = client.Reopen(ctx, g, from, from.Add(2*time.Minute), almanac.WriteOptions{Reason: "statement test"})
		require.NoError(t, err)
		_, err = client.Skip(ctx, g, to, to.Add(2*time.Minute), almanac.WriteOptions{Reason: "statement test"})
		require.NoError(t, err)
	}
	waitDone("re-opened slots")
	require.NoError(t, client.Stop(ctx))

	// An ejection and the lease writes the scheduler does not use.
	q, err := acquire.New(ctx, pool, grids[2], acquire.Options{Schema: schema, Policy: acquire.Policy{LeaseTTL: time.Minute}})
	require.NoError(t, err)
	_, err = client.Reopen(ctx, grids[2], from, from.Add(3*time.Minute), almanac.WriteOptions{Reason: "statement test"})
	require.NoError(t, err)
	leases, err := q.Claim(ctx, 2)
	require.NoError(t, err)
	require.Len(t, leases, 2)
	require.NoError(t, leases[0].Extend(ctx))
	_, _, err = leases[1].Finish(ctx, errors.New("statement test"))
	require.NoError(t, err)
	ejected, err := q.Eject(ctx, leases[0].Slot.Start)
	require.NoError(t, err)
	_, _, err = leases[0].Finish(ctx, nil)
	require.ErrorIs(t, err, almanac.ErrLeaseLost)
	require.NoError(t, ejected.Release(ctx))
	again, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	_, err = q.CompleteMany(ctx, again)
	require.NoError(t, err)
}

// statement is one SQL statement sent, with its arguments.
type statement struct {
	sql  string
	args []any
}

// statementRecorder is a pgx tracer that keeps every statement sent, alone
// or in a batch.
type statementRecorder struct {
	mu   sync.Mutex
	sent []statement
}

func (r *statementRecorder) add(sql string, args []any) {
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			args = args[1:] // how the statement is sent, not one of its parameters
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, statement{sql, slices.Clone(args)})
}

func (r *statementRecorder) all() []statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.add(data.SQL, data.Args)
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *statementRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *statementRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	r.add(data.SQL, data.Args)
}

func (r *statementRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// seriesNames returns the series the workload registered: the names bound
// to the series table's INSERT.
func (r *statementRecorder) seriesNames() map[string]bool {
	names := map[string]bool{}
	for _, st := range r.all() {
		if strings.Contains(st.sql, ".series (name") && len(st.args) > 0 {
			switch name := st.args[0].(type) {
			case string:
				names[name] = true
			case []string: // the engine's registration of all its series
				for _, n := range name {
					names[n] = true
				}
			}
		}
	}
	return names
}

var (
	nameEq     = regexp.MustCompile(`(?:\b\w+\.)?\bname = \$(\d+)`)
	intervalEq = regexp.MustCompile(`(?:\b\w+\.)?"interval" = \$(\d+)`)
	insertSlot = regexp.MustCompile(`(?s)^\s*(?:WITH \w+ AS \()?INSERT INTO \S+\.slot(?:_frontier)? \(name, "interval",.*?\bSELECT \$(\d+), \$(\d+),`)
	// slotRefs finds the references to the slot tables that read them; an
	// INSERT's target (prefixed INSERT INTO) takes its series from the
	// values it inserts.
	slotRefs = regexp.MustCompile(`(?:INSERT INTO )?\S*\.slot(?:_stored|_compacted|_frontier)?\b`)
)

// classify names the kind of a statement, or says why a statement that
// touches the slot table is not a single-series router query.
func classify(st statement, touchesSlot *regexp.Regexp, series map[string]bool) (string, error) {
	sql := strings.TrimSpace(st.sql)
	lower := strings.ToLower(sql)
	if touchesSlot.MatchString(sql) {
		if strings.HasPrefix(sql, "WITH RECURSIVE open AS (") {
			// The poll's scan for series with work (wake.Ready): once per
			// poll interval and process, over every series, so on every
			// shard; docs/scaling.md says so.
			return "slot: scan for series with work", nil
		}
		if strings.HasPrefix(sql, "WITH want AS (") {
			// The engine's grouped materialization: the newly due slots
			// of many series of one grid, under their writer locks.
			return "slot: insert of many series", nil
		}
		if strings.HasPrefix(sql, "SELECT n.name, least(") {
			// The engine's read of its series' first slots at start.
			return "slot: first slots of many series", nil
		}
		if strings.HasPrefix(sql, "SELECT n.name FROM unnest($1::text[]) AS n(name)") {
			// The grouped sweep's count of many series' windows.
			return "slot: count of many series", nil
		}
		if strings.HasPrefix(sql, "SELECT k.i, a.slot_start") {
			// A claim of a slot of each of many series (RunAcross):
			// batched jobs of several series in one transaction.
			return "slot: claim across series", nil
		}
		if m := insertSlot.FindStringSubmatch(sql); m != nil {
			return "slot: insert of one series", checkSeriesArgs(st, m[1], m[2], series)
		}
		names, intervals := nameEq.FindAllStringSubmatch(sql, -1), intervalEq.FindAllStringSubmatch(sql, -1)
		if len(names) == 0 || len(intervals) == 0 {
			return "", errors.New(`touches the slot table without "name = $n AND "interval" = $m"`)
		}
		nameParam, intervalParam := names[0][1], intervals[0][1]
		for _, m := range names {
			if m[1] != nameParam {
				return "", fmt.Errorf("constrains name by two parameters ($%s and $%s)", nameParam, m[1])
			}
		}
		for _, m := range intervals {
			if m[1] != intervalParam {
				return "", fmt.Errorf(`constrains "interval" by two parameters ($%s and $%s)`, intervalParam, m[1])
			}
		}
		// Every reference to the table must be constrained: a statement
		// that joins the table again without the series condition would
		// scan every shard.
		refs := 0
		for _, ref := range slotRefs.FindAllString(sql, -1) {
			if !strings.HasPrefix(ref, "INSERT INTO ") {
				refs++
			}
		}
		if refs > len(names) || refs > len(intervals) {
			return "", fmt.Errorf("references the slot table %d times but constrains name %d and \"interval\" %d times", refs, len(names), len(intervals))
		}
		return "slot: single series", checkSeriesArgs(st, nameParam, intervalParam, series)
	}
	switch {
	case strings.Contains(sql, ".reopen_downstream($1, $2,"):
		// A re-open of compacted slots re-opens what depends on the
		// slots it restored, as the trigger does for updated rows: the
		// downstream series' rows, docs/scaling.md says where.
		return "slot: re-open downstream of restored slots", nil
	case strings.Contains(sql, ".series"):
		if strings.Contains(sql, "WHERE name = $1 AND \"interval\" = $2") || strings.HasPrefix(sql, "INSERT INTO") {
			return "series: one series", nil
		}
		if strings.Contains(sql, `WHERE (name, "interval") IN (SELECT * FROM unnest($1::text[], $2::text[]))`) {
			return "series: many series (the engine's start)", nil
		}
		if strings.Contains(sql, `WHERE (name, "interval") IN (SELECT n, $2 FROM unnest($1::text[]) AS n)`) {
			return "series: writers' lock of many series (a group's insert)", nil
		}
		if strings.Contains(sql, "ORDER BY name") {
			return "series: list (reference table)", nil
		}
		return "", errors.New("touches the series table neither for one series nor as the listing")
	case strings.Contains(lower, "pg_notify("):
		return "notify", nil
	case strings.HasPrefix(lower, "listen "):
		return "listen", nil
	case strings.HasPrefix(lower, "begin"), lower == "commit", lower == "rollback",
		strings.HasPrefix(lower, "savepoint"), strings.HasPrefix(lower, "release savepoint"), strings.HasPrefix(lower, "rollback to savepoint"):
		return "transaction control", nil
	case strings.HasPrefix(lower, "select set_config("), strings.HasPrefix(lower, "set local"):
		return "settings", nil
	case strings.Contains(sql, "schema_migrations"):
		return "schema version check", nil
	case lower == "select 1", lower == "-- ping", lower == ";":
		return "ping", nil
	case lower == "select clock_timestamp()", lower == "select pg_backend_pid()",
		strings.HasPrefix(lower, "select pg_current_xact_id()"), strings.HasPrefix(lower, "select pg_xact_status("):
		return "clock and session", nil
	}
	return "", errors.New("a statement of a kind this test does not know: classify it (and say in docs/scaling.md how it distributes)")
}

// checkSeriesArgs checks that the parameters constraining name and
// "interval" are bound to one registered series.
func checkSeriesArgs(st statement, nameParam, intervalParam string, series map[string]bool) error {
	var n, i int
	if _, err := fmt.Sscan(nameParam, &n); err != nil {
		return err
	}
	if _, err := fmt.Sscan(intervalParam, &i); err != nil {
		return err
	}
	if n > len(st.args) || i > len(st.args) {
		return fmt.Errorf("parameters $%d and $%d, but %d arguments", n, i, len(st.args))
	}
	name, ok1 := st.args[n-1].(string)
	interval, ok2 := st.args[i-1].(string)
	if !ok1 || !ok2 || !series[name] || interval == "" {
		return fmt.Errorf("name and \"interval\" are bound to %v and %v, not to a registered series", st.args[n-1], st.args[i-1])
	}
	return nil
}
