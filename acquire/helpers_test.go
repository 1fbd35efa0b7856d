package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a migrated schema with one registered PT1M series, n slots
// materialized from fixtureFrom(n), and an effects table handlers write to.
type fixture struct {
	t      testing.TB
	db     *pgtest.DB
	grid   slot.Series
	from   time.Time
	slots  int
	schema string
}

func newFixture(t testing.TB, n int) *fixture {
	t.Helper()
	db := pgtest.New(t)
	grid, err := slot.NewSeries("report", mustInterval("PT1M"), time.UTC, time.Time{})
	require.NoError(t, err)
	ctx := context.Background()
	_, _, err = seriesdb.Add(ctx, db.Pool, db.Schema, grid)
	require.NoError(t, err)
	f := &fixture{t: t, db: db, grid: grid, from: fixtureFrom(n), slots: n, schema: db.Schema}
	var starts, ends []time.Time
	for s := range grid.Slots(f.from, f.from.Add(time.Duration(n)*time.Minute)) {
		starts = append(starts, s.Start)
		ends = append(ends, s.End)
	}
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
		SELECT 'report', 'PT1M', s, e FROM unnest($1::timestamptz[], $2::timestamptz[]) AS t(s, e)`, starts, ends)
	f.exec(`CREATE TABLE {{schema}}.effect (slot_start timestamptz NOT NULL, fence bigint NOT NULL, mode text NOT NULL)`)
	return f
}

// fixtureEnd bounds every fixture's slots: a date in the past, so that all
// of them are due whenever the tests run.
var fixtureEnd = time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)

// fixtureFrom is the start of a fixture of n PT1M slots: 2026-01-01T00:00Z,
// which the tests' expectations name, unless the slots would then reach
// past fixtureEnd (a benchmark's b.N can be a million), in which case they
// end there. A range that reached the present would leave its slots not
// yet due unacquired, and the count of the slots done short.
func fixtureFrom(n int) time.Time {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if span := time.Duration(n) * time.Minute; from.Add(span).After(fixtureEnd) {
		return fixtureEnd.Add(-span)
	}
	return from
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.db.Pool.Exec(context.Background(), sqlschema.Render(sql, f.schema), args...)
	require.NoError(f.t, err)
}

func (f *fixture) queue(opts Options) *Queue {
	return f.queueOn(f.db.Pool, opts)
}

func (f *fixture) queueOn(pool *pgxpool.Pool, opts Options) *Queue {
	f.t.Helper()
	opts.Schema = f.schema
	q, err := New(context.Background(), pool, f.grid, opts)
	require.NoError(f.t, err)
	return q
}

func (f *fixture) slotStart(i int) time.Time { return f.from.Add(time.Duration(i) * time.Minute) }

// row is a slot row as stored.
type row struct {
	Status      string
	Fence       int64
	Attempts    int
	FailCount   int
	Message     *string
	Owner       *string
	Parked      bool // not_before is infinity
	Data        []byte
	CompletedAt *time.Time
	// FromNow is not_before - clock_timestamp(), for backoff checks.
	FromNow *time.Duration
}

func (f *fixture) row(start time.Time) row {
	f.t.Helper()
	var r row
	err := f.db.Pool.QueryRow(context.Background(), sqlschema.Render(`SELECT status, fence, attempts, fail_count, message,
		owner::text, coalesce(not_before = 'infinity', false), data, completed_at,
		CASE WHEN not_before IS NULL OR not_before = 'infinity' THEN NULL ELSE not_before - clock_timestamp() END
		FROM {{schema}}.slot WHERE name = 'report' AND "interval" = 'PT1M' AND slot_start = $1`, f.schema), start).
		Scan(&r.Status, &r.Fence, &r.Attempts, &r.FailCount, &r.Message, &r.Owner, &r.Parked, &r.Data, &r.CompletedAt, &r.FromNow)
	require.NoError(f.t, err)
	return r
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.db.Pool.QueryRow(context.Background(), sqlschema.Render(sql, f.schema), args...).Scan(&n))
	return n
}

// expire ends the lease on the slot starting at start, as if its holder
// had stopped renewing it a minute ago: past any takeover grace a test
// uses, without waiting for it.
func (f *fixture) expire(start time.Time) {
	f.t.Helper()
	f.exec(`UPDATE {{schema}}.slot SET lease_until = clock_timestamp() - interval '1 minute' WHERE slot_start = $1 AND status = 'ACQUIRED'`, start)
}

// waitForDB waits until the database clock reaches at, on the server
// (pg_sleep_until), in a session of its own.
func (f *fixture) waitForDB(at time.Time) {
	f.t.Helper()
	_, err := f.db.Pool.Exec(context.Background(), `SELECT pg_sleep_until($1)`, at)
	require.NoError(f.t, err)
}

// effect is what handlers write: one row per slot they handled.
func effect(schema string) string {
	return sqlschema.Render(`INSERT INTO {{schema}}.effect (slot_start, fence, mode) VALUES ($1, $2, $3)`, schema)
}

func writeEffect(ctx context.Context, tx pgx.Tx, schema string, s Slot, mode string) error {
	_, err := tx.Exec(ctx, effect(schema), s.Start, s.Fence, mode)
	return err
}

// holdBatch starts a locked-mode batch of n slots on q whose first handler
// waits, and returns once the batch holds its slots. release lets it go on
// and returns what it did.
func holdBatch(q *Queue, n int) (release func() ([]Result, error)) {
	holding, done := make(chan struct{}), make(chan struct{})
	type outcome struct {
		results []Result
		err     error
	}
	out := make(chan outcome, 1)
	go func() {
		var once bool
		results, err := q.RunBatch(context.Background(), n, func(context.Context, pgx.Tx, Slot) error {
			if !once {
				once = true
				close(holding)
				<-done
			}
			return nil
		})
		out <- outcome{results, err}
	}()
	<-holding
	return func() ([]Result, error) {
		close(done)
		o := <-out
		return o.results, o.err
	}
}

// The final writes of a lease by kind, as the tests call them: each is what
// Finish does for its kind of error, and Complete writes even when the lease
// is finished already, to show that a stale holder's write is refused.

func (l *Lease) Complete(ctx context.Context) error { return l.complete(ctx) }

func (l *Lease) Fail(ctx context.Context, err error) (Outcome, time.Duration, error) {
	return l.Finish(ctx, err)
}

func (l *Lease) Skip(ctx context.Context, reason string) error {
	_, _, err := l.Finish(ctx, Skip(reason))
	return err
}

func (l *Lease) Snooze(ctx context.Context, d time.Duration, data any) error {
	_, _, err := l.Finish(ctx, Snooze(d).WithData(data))
	return err
}

func (l *Lease) Finished() bool { return l.isFinished() }

func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (q *Queue) Extend(ctx context.Context, leases []*Lease) ([]*Lease, error) {
	return q.extend(ctx, leases)
}
