package almanac_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/almanactest"
)

// A report per five-minute window, each written exactly once, in the same
// transaction that marks its slot COMPLETE.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t) // in a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), schema "almanac"
	client, err := almanac.New(pool, almanac.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := client.Migrate(ctx); err != nil {
		panic(err)
	}
	reports, err := client.Series(ctx, "sensor_report", "PT5M", almanac.SeriesOptions{TimeZone: "UTC"})
	if err != nil {
		panic(err)
	}
	table := pgx.Identifier{schema, "report"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (slot text PRIMARY KEY, fence bigint)"); err != nil {
		panic(err)
	}

	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)
	err = client.Register(almanac.Job{
		Series: reports,
		From:   from,
		To:     to,
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2)", s.String(), s.Fence)
			return err
		}})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	gaps, err := client.Gaps(ctx, reports, from, to)
	if err != nil {
		panic(err)
	}
	var first string
	if err := pool.QueryRow(ctx, "SELECT min(slot) FROM "+table).Scan(&first); err != nil {
		panic(err)
	}
	fmt.Println(summary.Completed, "slots complete,", len(gaps), "gaps")
	fmt.Println("first report:", first)
	// Output:
	// 12 slots complete, 0 gaps
	// first report: 2026-03-01T00:00:00Z/PT5M
}

// The examples below run against the tests' server, each in a schema of
// its own. In a program the pool and the client come from:
//
//	pool, err := almanac.NewPool(ctx, os.Getenv("DATABASE_URL"), almanac.PoolOptions{})
//	client, err := almanac.New(pool, almanac.Options{})
//	_, err = client.Migrate(ctx)

// day is the first day of the examples' slots, long due.
var day = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// exampleClient returns a migrated client on a fresh schema, its pool, and
// a table of that schema for the handlers' writes, report (slot text,
// fence bigint).
func exampleClient(ctx context.Context) (client *almanac.Client, pool *pgxpool.Pool, table string) {
	client, pool, schema := exampleSchema()
	table = pgx.Identifier{schema, "report"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (slot text PRIMARY KEY, fence bigint)"); err != nil {
		panic(err)
	}
	return client, pool, table
}

// exampleSchema returns a migrated client on a fresh schema, its pool and
// the schema's name.
func exampleSchema() (*almanac.Client, *pgxpool.Pool, string) {
	t := almanactest.ExampleTB()
	schema := almanactest.Schema(t)
	return almanactest.Client(t, almanac.Options{Schema: schema}), almanactest.Pool(t), schema
}

// hourly registers the hourly series name.
func hourly(ctx context.Context, client *almanac.Client, name string) almanac.Series {
	s, err := client.Series(ctx, name, "PT1H", almanac.SeriesOptions{TimeZone: "UTC"})
	if err != nil {
		panic(err)
	}
	return s
}

// rows counts the rows of table.
func rows(ctx context.Context, pool *pgxpool.Pool, table string) int {
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		panic(err)
	}
	return n
}

// A handler's writes commit with its slot's COMPLETE, or not at all: a
// handler that fails has its writes rolled back, and the slot is tried
// again after the retry policy's delay (1 s first, by default); Drain waits
// for retries that come within seconds.
func ExampleHandler() {
	ctx := context.Background()
	client, pool, table := exampleClient(ctx)
	series := hourly(ctx, client, "report")

	attempts := 0
	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(time.Hour),
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			attempts++
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2)", s.String(), s.Fence); err != nil {
				return err
			}
			if s.Attempt == 1 {
				return errors.New("upstream not ready") // the row above is rolled back
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(summary.Completed, "complete after", attempts, "attempts;", rows(ctx, pool, table), "row")
	// Output: 1 complete after 2 attempts; 1 row
}

// Batched locked mode: a Batch above 1 locks up to that many slots per
// transaction, each handler in a savepoint, and records their outcomes
// with one statement: the throughput path for short handlers.
func ExampleJob_batched() {
	ctx := context.Background()
	client, pool, table := exampleClient(ctx)
	series := hourly(ctx, client, "report")

	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.AddDate(0, 0, 7),
		Batch: 100,
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2)", s.String(), s.Fence)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(summary.Completed, "complete,", rows(ctx, pool, table), "rows")
	// Output: 168 complete, 168 rows
}

// Lease mode: the slot is claimed with a committed lease that a heartbeat
// renews, and no connection is held while the handler works. CompleteTx
// completes the slot inside the handler's own transaction, so its writes
// and the completion commit together; the fencing token guards them.
func ExampleJob_lease() {
	ctx := context.Background()
	client, pool, table := exampleClient(ctx)
	series := hourly(ctx, client, "report")

	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(3 * time.Hour),
		Policy: almanac.Policy{LeaseTTL: time.Minute},
		LeaseHandler: func(ctx context.Context, l *almanac.Lease) error {
			// Long work, outside any transaction, goes here.
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := l.CompleteTx(ctx, tx); err != nil {
					return err // almanac.ErrLeaseLost: another worker has the slot
				}
				_, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2)", l.Slot.String(), l.Fence)
				return err
			})
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(summary.Completed, "complete,", rows(ctx, pool, table), "rows")
	// Output: 3 complete, 3 rows
}

// Late data and the re-open of its window in one transaction: the data
// and the re-open commit together or not at all, and idle workers are
// woken when the transaction commits.
func ExampleClient_ReopenTx() {
	ctx := context.Background()
	client, pool, table := exampleClient(ctx)
	series := hourly(ctx, client, "report")
	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(4 * time.Hour),
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2) ON CONFLICT (slot) DO UPDATE SET fence = excluded.fence",
				s.String(), s.Fence)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	if _, err := client.Drain(ctx); err != nil {
		panic(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	// tx.Exec(ctx, `INSERT INTO readings …`): the late data, then:
	res, err := client.ReopenTx(ctx, tx, series, day.Add(time.Hour), day.Add(3*time.Hour), almanac.WriteOptions{Reason: "late readings"})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("re-opened", res.Changed, "slots; recomputed", summary.Completed)
	// Output: re-opened 2 slots; recomputed 2
}

// Slots can be created inside the caller's transaction too: here with the
// table their handler fills, so neither exists without the other.
func ExampleClient_MaterializeTx() {
	ctx := context.Background()
	client, pool, table := exampleClient(ctx)
	series := hourly(ctx, client, "report")

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN source text"); err != nil {
		panic(err)
	}
	res, err := client.MaterializeTx(ctx, tx, series, day, day.Add(24*time.Hour), almanac.WriteOptions{})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	st, err := client.Status(ctx, series, day, day.Add(24*time.Hour))
	if err != nil {
		panic(err)
	}
	fmt.Println("inserted", res.Inserted, "slots;", st.Available, "available,", st.Missing, "missing")
	// Output: inserted 24 slots; 24 available, 0 missing
}

// Skipping slots inside the caller's transaction: a holiday recorded in
// the program's own table, and its slots marked SKIP with the reason, at
// once.
func ExampleClient_SkipTx() {
	ctx := context.Background()
	client, pool, _ := exampleClient(ctx)
	series, err := client.Series(ctx, "billing", "P1D", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	if err != nil {
		panic(err)
	}
	christmas := time.Date(2026, 12, 25, 0, 0, 0, 0, series.Location())

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	// tx.Exec(ctx, `INSERT INTO holidays …`), then:
	res, err := client.SkipTx(ctx, tx, series, christmas, christmas.AddDate(0, 0, 2), almanac.WriteOptions{Reason: "holiday"})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	h, err := client.History(ctx, series, christmas)
	if err != nil {
		panic(err)
	}
	fmt.Println("skipped", res.Changed, "days;", h.Slot, h.Current.Status, h.Current.Message)
	// Output: skipped 2 days; 2026-12-25T00:00:00+01:00/P1D SKIP holiday
}

// Slots that gave up (parked after Policy.MaxAttempts) stay visible until a
// person gives them another chance: Retry, here inside the transaction
// that also fixes their input.
func ExampleClient_RetryTx() {
	ctx := context.Background()
	client, pool, table := exampleClient(ctx)
	series := hourly(ctx, client, "report")
	fixed := false
	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(2 * time.Hour),
		Policy: almanac.Policy{MaxAttempts: 1},
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			if !fixed {
				return errors.New("bad input")
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (slot, fence) VALUES ($1, $2)", s.String(), s.Fence)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	var left *almanac.IncompleteError
	if !errors.As(err, &left) {
		panic(err)
	}
	fmt.Println(summary.Parked, "parked;", left)

	fixed = true
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	// tx.Exec(ctx, `UPDATE inputs …`): the fix, then:
	res, err := client.RetryTx(ctx, tx, series, day, day.Add(2*time.Hour), almanac.WriteOptions{})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	summary, err = client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Unparked, "un-parked;", summary.Completed, "complete")
	// Output:
	// 2 parked; 2 slots left unfinished: 2 parked after their last attempt
	// 2 un-parked; 2 complete
}

// A handler that finds no result yet snoozes: the slot stays AVAILABLE and
// comes back after the delay, without counting a failure; WithData saves a
// checkpoint the next attempt finds in Slot.Data.
func ExampleSnooze() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	series := hourly(ctx, client, "export")
	var checkpoints []string
	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(time.Hour),
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			checkpoints = append(checkpoints, string(s.Data))
			if s.Data == nil {
				return almanac.Snooze(100 * time.Millisecond).WithData(map[string]string{"job": "exp-42"})
			}
			return nil // the remote job exp-42 is done
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(summary.Snoozed, "snoozed,", summary.Completed, "complete; data seen:", checkpoints)
	// Output: 1 snoozed, 1 complete; data seen: [ {"job": "exp-42"}]
}

// A retry policy maps a slot's failures to the wait before it is tried
// again; Policy.MaxAttempts parks a slot after its last attempt. Without
// jitter the waits are exact.
func ExampleExponential() {
	policy := almanac.Policy{Retry: almanac.Exponential(time.Second, time.Minute, 0), MaxAttempts: 8}
	for failures := 1; failures <= 8; failures++ {
		delay, _ := policy.Retry(failures, errors.New("upstream 503"))
		fmt.Print(delay, " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 16s 32s 1m0s 1m0s
}

// Gaps lists the missing slots of a range as maximal runs, and Status
// counts the range's slots by state, missing ones included.
func ExampleClient_Status() {
	ctx := context.Background()
	client, pool, schema := exampleSchema()
	series := hourly(ctx, client, "report")
	if _, err := client.Materialize(ctx, series, day, day.Add(24*time.Hour), almanac.WriteOptions{}); err != nil {
		panic(err)
	}
	// Rows deleted by hand, or never written by another tool, are gaps.
	if _, err := pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, "slot"}.Sanitize()+" WHERE slot_start >= $1 AND slot_start < $2",
		day.Add(5*time.Hour), day.Add(8*time.Hour)); err != nil {
		panic(err)
	}
	gaps, err := client.Gaps(ctx, series, day, day.Add(24*time.Hour))
	if err != nil {
		panic(err)
	}
	st, err := client.Status(ctx, series, day, day.Add(24*time.Hour))
	if err != nil {
		panic(err)
	}
	for _, g := range gaps {
		fmt.Println("gap:", g.Start.Format(time.Kitchen), "to", g.End.Format(time.Kitchen), g.Slots, "slots")
	}
	fmt.Printf("%d slots: %d available, %d missing, %.0f%% covered\n", st.Slots, st.Available, st.Missing, st.Covered())
	// Output:
	// gap: 5:00AM to 8:00AM 3 slots
	// 24 slots: 21 available, 3 missing, 0% covered
}

// A job started with its range in the past meets the slots it missed: its
// catch-up policy says which to run. CatchUpAll (the default) runs them
// all; CatchUpLatest(n) runs the latest n and writes the older ones SKIP
// (CatchUpNone, all but those due within a minute or an interval). Skipped
// slots stay visible, and can be re-opened.
func ExampleCatchUpLatest() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	policies := []almanac.CatchUp{almanac.CatchUpAll, almanac.CatchUpLatest(3)}
	var series []almanac.Series
	for i, policy := range policies {
		s := hourly(ctx, client, fmt.Sprintf("report_%d", i))
		series = append(series, s)
		err := client.Register(almanac.Job{
			Series: s, From: day, To: day.Add(24 * time.Hour), CatchUp: policy,
			Handler: func(context.Context, pgx.Tx, almanac.Slot) error { return nil },
		})
		if err != nil {
			panic(err)
		}
	}
	if _, err := client.Drain(ctx); err != nil {
		panic(err)
	}
	for i, policy := range policies {
		st, err := client.Status(ctx, series[i], day, day.Add(24*time.Hour))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d run, %d skipped\n", policy, st.Complete, st.Skip)
	}
	// Output:
	// all: 24 run, 0 skipped
	// latest:3: 3 run, 21 skipped
}

// Command runs a program once per slot, with the slot in its environment
// and only what the program needs besides: the sidecar's handler, for a
// lease-mode job. Exit status 0 completes the slot, 99 skips it, anything
// else is a failure with the end of stderr as its message.
func ExampleCommand() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	series := hourly(ctx, client, "nightly")
	var out strings.Builder
	cmd := almanac.Command{
		Path:   "/bin/sh",
		Args:   []string{"-c", `[ "${ALMANAC_SLOT_START#*T}" = 02:00:00Z ] && exit 99; echo "report $ALMANAC_SLOT"`},
		Stdout: &out,
	}
	if err := cmd.Check(); err != nil { // before anything is claimed
		panic(err)
	}
	err := client.Register(almanac.Job{Series: series, From: day, To: day.Add(3 * time.Hour), LeaseHandler: cmd.LeaseHandler(),
		Policy: almanac.Policy{LeaseTTL: time.Minute}})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	if err != nil {
		panic(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	slices.Sort(lines)
	fmt.Println(summary.Completed, "complete,", summary.Skipped, "skipped")
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// 2 complete, 1 skipped
	// [nightly 2026-03-01T00:00:00Z/PT1H] report 2026-03-01T00:00:00Z/PT1H
	// [nightly 2026-03-01T01:00:00Z/PT1H] report 2026-03-01T01:00:00Z/PT1H
}

// Compact bounds the slot table: finished slots older than a retention are
// deleted into compacted ranges, about one row per series and run of one
// state. They stay finished for every reader and writer.
func ExampleClient_Compact() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	series := hourly(ctx, client, "report")
	if _, err := client.Skip(ctx, series, day, day.AddDate(0, 0, 30), almanac.WriteOptions{Reason: "no data yet"}); err != nil {
		panic(err)
	}
	res, err := client.Compact(ctx, day.AddDate(0, 0, 30), almanac.WriteOptions{})
	if err != nil {
		panic(err)
	}
	st, err := client.Status(ctx, series, day, day.AddDate(0, 0, 30))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Changed, "slots compacted into", res.Ranges, "range;", st.Skip, "still skipped,", st.Missing, "missing")
	// Output: 720 slots compacted into 1 range; 720 still skipped, 0 missing
}

// Heatmap counts a range's slots by state in buckets of a calendar unit in
// the series' zone, for a coverage calendar: here the days of March, of
// which the 29th has 23 hours in Berlin.
func ExampleClient_Heatmap() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	series, err := client.Series(ctx, "report", "PT1H", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	if err != nil {
		panic(err)
	}
	from := time.Date(2026, 3, 28, 0, 0, 0, 0, series.Location())
	to := from.AddDate(0, 0, 3)
	if _, err := client.Skip(ctx, series, from, from.AddDate(0, 0, 1), almanac.WriteOptions{Reason: "maintenance"}); err != nil {
		panic(err)
	}
	if _, err := client.Materialize(ctx, series, from, to, almanac.WriteOptions{}); err != nil {
		panic(err)
	}
	h, err := client.Heatmap(ctx, series, from, to, 10)
	if err != nil {
		panic(err)
	}
	fmt.Println("unit:", h.Unit)
	for _, b := range h.Buckets {
		fmt.Printf("%s: %d slots, %d skipped, %d open\n", b.Start.Format("Jan 2"), b.Slots, b.Skipped, b.Open)
	}
	// Output:
	// unit: day
	// Mar 28: 24 slots, 24 skipped, 0 open
	// Mar 29: 23 slots, 0 skipped, 23 open
	// Mar 30: 24 slots, 0 skipped, 24 open
}

// Failures lists the slots whose last run failed, of every series or of
// one, with their messages: what a person looks at first.
func ExampleClient_Failures() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	series := hourly(ctx, client, "report")
	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(4 * time.Hour),
		Policy: almanac.Policy{Retry: func(int, error) (time.Duration, bool) { return time.Hour, true }},
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			if s.Start.Hour()%2 == 1 {
				return fmt.Errorf("upstream 503 for %s", s.Start.Format("15:04"))
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	if _, err := client.Drain(ctx); !errors.Is(err, almanac.ErrIncomplete) {
		panic(err)
	}
	failures, more, err := client.Failures(ctx, almanac.FailuresOptions{Name: "report"})
	if err != nil {
		panic(err)
	}
	for _, f := range failures {
		fmt.Println(f.Start.Format("15:04"), f.FailCount, f.Message)
	}
	fmt.Println("more:", more)
	// Output:
	// 01:00 1 upstream 503 for 01:00
	// 03:00 1 upstream 503 for 03:00
	// more: false
}

// Drain is the batch run of a cron-driven program: it materializes what is
// due, works every slot in the jobs' scopes, and returns when each is done
// or has had its chance, with the outcomes; an error wrapping
// ErrIncomplete says what is left.
func ExampleClient_Drain() {
	ctx := context.Background()
	client, _, _ := exampleClient(ctx)
	series := hourly(ctx, client, "report")
	err := client.Register(almanac.Job{
		Series: series, From: day, To: day.Add(24 * time.Hour),
		Policy: almanac.Policy{MaxAttempts: 1},
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			switch s.Start.Hour() {
			case 12:
				return almanac.Skip("lunch")
			case 23:
				return errors.New("no input")
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	summary, err := client.Drain(ctx)
	fmt.Printf("%+v\n", summary)
	var left *almanac.IncompleteError
	if errors.As(err, &left) {
		fmt.Println(left.Parked, "parked:", err)
	}
	// Output:
	// {Completed:22 Skipped:1 Snoozed:0 Failed:0 Parked:1 Abandoned:0}
	// 1 parked: 1 slot left unfinished: 1 parked after its last attempt
}
