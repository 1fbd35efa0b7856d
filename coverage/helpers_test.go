package coverage

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a migrated schema with one registered series.
type fixture struct {
	t    testing.TB
	db   *pgtest.DB
	grid slot.Series
	c    *Client
}

func newFixture(t testing.TB, grid slot.Series, opts Options) *fixture {
	t.Helper()
	db := pgtest.New(t)
	_, _, err := seriesdb.Add(context.Background(), db.Pool, db.Schema, grid)
	require.NoError(t, err)
	opts.Schema = db.Schema
	c, err := New(context.Background(), db.Pool, grid, opts)
	require.NoError(t, err)
	return &fixture{t: t, db: db, grid: grid, c: c}
}

func series(t testing.TB, name, interval, zone string, origin time.Time) slot.Series {
	t.Helper()
	loc, err := slot.LoadZone(zone)
	require.NoError(t, err)
	s, err := slot.NewSeries(name, mustInterval(interval), loc, origin)
	require.NoError(t, err)
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func (f *fixture) exec(sql string, args ...any) int64 {
	f.t.Helper()
	tag, err := f.db.Pool.Exec(context.Background(), sqlschema.Render(sql, f.db.Schema), args...)
	require.NoError(f.t, err)
	return tag.RowsAffected()
}

// row is what the tests check of a stored slot.
type row struct {
	Start, End time.Time
	Status     string
	Message    *string
	FailCount  int
	Attempts   int
	NotBefore  pgtype.Timestamptz
	Fence      int64
	HasData    bool
}

// rows returns the series' rows in [from, to) in slot order.
func (f *fixture) rows(from, to time.Time) []row {
	f.t.Helper()
	rs, err := f.db.Pool.Query(context.Background(), sqlschema.Render(`SELECT slot_start, slot_end, status, message,
		fail_count, attempts, not_before, fence, data IS NOT NULL FROM {{schema}}.slot
		WHERE name = $1 AND "interval" = $2 AND slot_start >= $3 AND slot_start < $4 ORDER BY slot_start`, f.db.Schema),
		f.grid.Name(), f.grid.Interval().String(), from, to)
	require.NoError(f.t, err)
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.Start, &x.End, &x.Status, &x.Message, &x.FailCount, &x.Attempts, &x.NotBefore, &x.Fence, &x.HasData)
		return x, err
	})
	require.NoError(f.t, err)
	return out
}

// gridOf returns the grid's slots in [from, to).
func (f *fixture) gridOf(from, to time.Time) []slot.Slot {
	var out []slot.Slot
	for sl := range f.grid.Slots(from, to) {
		out = append(out, sl)
	}
	return out
}

// requireGrid checks the stored rows of [from, to) are exactly the grid's
// slots, bounds included.
func (f *fixture) requireGrid(from, to time.Time) {
	f.t.Helper()
	want := f.gridOf(from, to)
	got := f.rows(from, to)
	require.Len(f.t, got, len(want))
	for i, sl := range want {
		require.True(f.t, got[i].Start.Equal(sl.Start) && got[i].End.Equal(sl.End),
			"row %d is [%s, %s), grid slot is %s", i, got[i].Start, got[i].End, sl)
	}
}

// gaps collects Gaps.
func (f *fixture) gaps(from, to time.Time) []Gap {
	f.t.Helper()
	var out []Gap
	for g, err := range f.c.Gaps(context.Background(), from, to) {
		require.NoError(f.t, err)
		out = append(out, g)
	}
	return out
}

// bruteGaps computes the gaps of [from, to) slot by slot, from the rows.
func (f *fixture) bruteGaps(from, to time.Time) []Gap {
	f.t.Helper()
	stored := map[int64]bool{}
	for _, r := range f.rows(from, to) {
		stored[r.Start.UnixMicro()] = true
	}
	var out []Gap
	for sl := range f.grid.Slots(from, to) {
		if stored[sl.Start.UnixMicro()] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End.Equal(sl.Start) {
			out[n-1].End, out[n-1].Slots = sl.End, out[n-1].Slots+1
			continue
		}
		out = append(out, Gap{Start: sl.Start, End: sl.End, Slots: 1})
	}
	return out
}

func requireSameGaps(t testing.TB, want, got []Gap) {
	t.Helper()
	require.Len(t, got, len(want), "gaps: want %v, got %v", want, got)
	for i := range want {
		require.True(t, want[i].Start.Equal(got[i].Start) && want[i].End.Equal(got[i].End) && want[i].Slots == got[i].Slots,
			"gap %d: want %+v, got %+v", i, want[i], got[i])
	}
}

// holdLocked holds the rows of the series starting at starts with FOR NO KEY
// UPDATE in an open transaction, as a locked-mode worker does, until the
// returned function is called.
func (f *fixture) holdLocked(starts ...time.Time) (release func()) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(f.t, err)
	rs, err := tx.Query(ctx, sqlschema.Render(`SELECT slot_start FROM {{schema}}.slot
		WHERE name = $1 AND "interval" = $2 AND slot_start = ANY($3) FOR NO KEY UPDATE`, f.db.Schema),
		f.grid.Name(), f.grid.Interval().String(), starts)
	require.NoError(f.t, err)
	locked, err := pgx.CollectRows(rs, pgx.RowTo[time.Time])
	require.NoError(f.t, err)
	require.Len(f.t, locked, len(starts))
	done := false
	release = func() {
		if !done {
			done = true
			require.NoError(f.t, tx.Rollback(ctx))
		}
	}
	f.t.Cleanup(release)
	return release
}

// listen returns a channel of the notifications on the schema's wake
// channel, received on a dedicated connection until the test ends.
func (f *fixture) listen() <-chan wake.Event {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := f.db.Pool.Acquire(ctx)
	require.NoError(f.t, err)
	_, err = conn.Exec(ctx, "LISTEN "+sqlschema.Quote(wake.Channel(f.db.Schema)))
	require.NoError(f.t, err)
	events := make(chan wake.Event, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err != nil {
				return
			}
			ev, err := wake.Parse(n.Payload)
			if err == nil {
				events <- ev
			}
		}
	}()
	f.t.Cleanup(func() {
		cancel()
		<-done
		// The connection was interrupted mid-wait: do not return it to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	})
	return events
}

// nth returns the start of the n-th slot from the first slot at or after t.
func (f *fixture) nth(t time.Time, n int) time.Time {
	sl, err := f.grid.Floor(t)
	require.NoError(f.t, err)
	sl, err = f.grid.Slot(sl.Index + int64(n))
	require.NoError(f.t, err)
	return sl.Start
}

// eventStarts returns, in order, the starts of the series' slots with a
// history event named event carrying message.
func (f *fixture) eventStarts(event, message string) []time.Time {
	f.t.Helper()
	rs, err := f.db.Pool.Query(context.Background(), sqlschema.Render(`SELECT slot_start FROM {{schema}}.slot_event
		WHERE name = $1 AND "interval" = $2 AND event = $3 AND message = $4 ORDER BY slot_start`, f.db.Schema),
		f.grid.Name(), f.grid.Interval().String(), event, message)
	require.NoError(f.t, err)
	starts, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (time.Time, error) {
		t, err := pgx.RowTo[time.Time](r)
		return t.UTC(), err
	})
	require.NoError(f.t, err)
	return starts
}

// startsAt returns the starts of the slots i of the fixture's PT1M grid
// from from.
func startsAt(from time.Time, is ...int) []time.Time {
	out := make([]time.Time, len(is))
	for k, i := range is {
		out[k] = from.Add(time.Duration(i) * time.Minute).UTC()
	}
	return out
}
