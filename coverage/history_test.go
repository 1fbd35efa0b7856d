package coverage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// briefly is an event without its time and run, for comparisons.
type briefly struct {
	Event      string
	Generation int64
	Actor      string
	Message    string
}

func brief(events []HistoryEvent) []briefly {
	var out []briefly
	for _, e := range events {
		out = append(out, briefly{e.Event, e.Generation, e.Actor, e.Message})
	}
	return out
}

func (f *fixture) history(start time.Time) History {
	f.t.Helper()
	h, err := f.c.History(context.Background(), start)
	require.NoError(f.t, err)
	return h
}

// TestHistoryOfOperations: re-open, retry and skip record one event per
// slot they change, with the reason and the client's actor; re-open starts
// a new generation; dry runs record nothing.
func TestHistoryOfOperations(t *testing.T) {
	f := newFixture(t, series(t, "ops", "PT1M", "UTC", time.Time{}), Options{Actor: "alice@laptop"})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	at := func(i int) time.Time { return from.Add(time.Duration(i) * time.Minute) }
	_, err := f.c.Materialize(ctx, from, at(4), WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', attempts = 2, fence = 7, data = '{"n": 1}', completed_at = now() WHERE slot_start = $1`, at(0))
	f.exec(`UPDATE {{schema}}.slot SET not_before = 'infinity', fail_count = 3, message = 'boom' WHERE slot_start = $1`, at(1))

	_, err = f.c.Reopen(ctx, from, at(4), WriteOptions{Reason: "late data", DryRun: true})
	require.NoError(t, err)
	_, err = f.c.Skip(ctx, at(2), at(3), WriteOptions{Reason: "holiday", DryRun: true})
	require.NoError(t, err)
	require.Empty(t, f.history(at(0)).Events, "dry runs record nothing")

	_, err = f.c.Reopen(ctx, from, at(4), WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	_, err = f.c.Retry(ctx, from, at(4), WriteOptions{})
	require.NoError(t, err)
	_, err = f.c.Skip(ctx, at(2), at(5), WriteOptions{Reason: "holiday"})
	require.NoError(t, err)

	h := f.history(at(0).Add(30 * time.Second))
	require.Equal(t, "2026-01-01T00:00:00Z/PT1M", h.Slot.String(), "the slot that contains the time")
	require.Equal(t, []briefly{{eventReopened, 2, "alice@laptop", "late data"}}, brief(h.Events))
	require.NotNil(t, h.Current)
	require.Equal(t, Current{Status: statusAvailable, Generation: 2, Fence: 7, Message: "late data",
		CreatedAt: h.Current.CreatedAt, UpdatedAt: h.Current.UpdatedAt}, *h.Current, "attempts, data and completion cleared")
	require.Equal(t, []briefly{
		{eventChangedBySQL, 1, f.sqlActor(""), "boom"}, // the fixture's parking, by plain SQL
		{eventRetried, 1, "alice@laptop", "un-parked: the retry policy starts afresh"},
	}, brief(f.history(at(1)).Events))
	require.Equal(t, []briefly{{eventSkipped, 1, "alice@laptop", "holiday"}}, brief(f.history(at(2)).Events))
	h = f.history(at(4))
	require.Equal(t, []briefly{{eventSkipped, 1, "alice@laptop", "holiday"}}, brief(h.Events), "a missing slot inserted as SKIP")
	require.Equal(t, statusSkip, h.Current.Status)

	missing := f.history(at(9))
	require.Nil(t, missing.Current)
	require.Empty(t, missing.Events)

	// Without an actor, the session's role is recorded.
	anonymous, err := New(ctx, f.db.Pool, f.grid, Options{Schema: f.db.Schema})
	require.NoError(t, err)
	_, err = anonymous.Reopen(ctx, at(2), at(3), WriteOptions{})
	require.NoError(t, err)
	var role string
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT session_user`).Scan(&role))
	require.Equal(t, briefly{eventReopened, 2, role, defaults.ReopenReason}, brief(f.history(at(2)).Events)[1])
}

// sqlActor is the actor the trigger records for the fixture's sessions:
// the role, and the application name (app, else the pool's) if any.
func (f *fixture) sqlActor(app string) string {
	f.t.Helper()
	var actor string
	require.NoError(f.t, f.db.Pool.QueryRow(context.Background(),
		`SELECT session_user || coalesce(' (' || nullif(coalesce($1, current_setting('application_name')), '') || ')', '')`,
		func() *string {
			if app == "" {
				return nil
			}
			return &app
		}()).Scan(&actor))
	return actor
}

// TestFreeTextIsChecked: reasons and actors that cannot be stored are
// refused before anything is written.
func TestFreeTextIsChecked(t *testing.T) {
	f := newFixture(t, series(t, "text", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	for _, bad := range []string{"a\rb", "nul\x00", string([]byte{0xff}), string(make([]byte, 1025)), "\u202eevil"} {
		_, err := f.c.Reopen(ctx, from, from.Add(time.Minute), WriteOptions{Reason: bad})
		require.ErrorIs(t, err, slot.ErrInvalid, "%q", bad)
		_, err = f.c.Skip(ctx, from, from.Add(time.Minute), WriteOptions{Reason: bad})
		require.ErrorIs(t, err, slot.ErrInvalid, "%q", bad)
		_, err = f.c.Materialize(ctx, from, from.Add(time.Minute), WriteOptions{Reason: bad})
		require.ErrorIs(t, err, slot.ErrInvalid, "%q", bad)
		_, err = New(ctx, f.db.Pool, f.grid, Options{Schema: f.db.Schema, Actor: bad})
		require.ErrorIs(t, err, slot.ErrInvalid, "%q", bad)
	}
	// An actor is one line; a reason may hold tabs and newlines.
	_, err := New(ctx, f.db.Pool, f.grid, Options{Schema: f.db.Schema, Actor: "a\nb"})
	require.ErrorIs(t, err, slot.ErrInvalid)
	require.Zero(t, f.exec(`SELECT FROM {{schema}}.slot`))
}

// TestPlainSQLIsAClient: a plain SQL insert wakes the schema's listening
// workers once per statement, an UPDATE that makes slots AVAILABLE once per
// transaction and series; an UPDATE that re-opens a slot does what Reopen
// does to the columns it leaves alone and is recorded with its actor.
func TestPlainSQLIsAClient(t *testing.T) {
	f := newFixture(t, series(t, "plain", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	at := func(i int) time.Time { return from.Add(time.Duration(i) * time.Minute) }
	events := f.listen()
	next := func() wake.Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no notification")
		}
		return wake.Event{}
	}
	// sentinel proves that nothing else was sent before it: notifications
	// arrive in commit order.
	sentinel := func() {
		t.Helper()
		require.NoError(t, wake.Notify(ctx, f.db.Pool, f.db.Schema, wake.Event{Name: "sentinel"}))
		require.Equal(t, "sentinel", next().Name)
	}

	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
		SELECT 'plain', 'PT1M', s, s + interval '1 minute' FROM generate_series($1::timestamptz, $2, interval '1 minute') AS s`, at(0), at(3))
	require.Equal(t, wake.Event{Reason: "sql"}, next(), "one notification for the insert, for every series")
	sentinel()
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end) VALUES ('plain', 'PT1M', $1, $2) ON CONFLICT DO NOTHING`, at(0), at(1))
	require.Equal(t, wake.Event{Reason: "sql"}, next(), "a statement that inserted nothing wakes workers in vain, harmlessly")
	_, err := f.c.Materialize(ctx, at(4), at(5), WriteOptions{})
	require.NoError(t, err)
	require.Equal(t, wake.Event{Name: "plain", Interval: "PT1M", Reason: "materialize"}, next(), "almanac's own insert: its own notification only")
	sentinel()
	require.Empty(t, f.history(at(0)).Events, "an insert is not an event: created_at records it")

	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', attempts = 3, fail_count = 0, data = '{"x": 1}', completed_at = now()`)
	sentinel() // nothing became acquirable

	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL application_name = 'billing-svc'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late invoices' WHERE slot_start < $1`, f.db.Schema), at(2))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, wake.Event{Name: "plain", Interval: "PT1M", Reason: "sql"}, next(), "one notification for both slots")
	sentinel()
	h := f.history(at(0))
	require.Equal(t, []briefly{{eventReopened, 2, f.sqlActor("billing-svc"), "late invoices"}}, brief(h.Events))
	require.Equal(t, Current{Status: statusAvailable, Generation: 2, Message: "late invoices",
		CreatedAt: h.Current.CreatedAt, UpdatedAt: h.Current.UpdatedAt}, *h.Current, "attempts, data and completion cleared")
	require.True(t, h.Current.UpdatedAt.After(h.Current.CreatedAt))

	// What the statement sets itself is kept; almanac.actor names the actor.
	tx, err = f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL almanac.actor = 'nightly backfill'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', attempts = 5, generation = 10,
		not_before = clock_timestamp() + interval '1 hour' WHERE slot_start = $1`, f.db.Schema), at(2))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	sentinel() // re-opened for later: not acquirable now, nobody to wake
	h = f.history(at(2))
	require.Equal(t, []briefly{{eventReopened, 10, "nightly backfill", ""}}, brief(h.Events))
	require.Equal(t, 5, h.Current.Attempts)

	// Clearing the backoff by hand is a change recorded, and wakes workers.
	f.exec(`UPDATE {{schema}}.slot SET not_before = NULL WHERE slot_start = $1`, at(2))
	require.Equal(t, "plain", next().Name)
	require.Equal(t, eventChangedBySQL, f.history(at(2)).Events[1].Event)
}

// TestPlainSQLNeedsNoGrantOnTheHistory: a role that may only update slots
// can re-open them; the trigger records the event with the role's name.
func TestPlainSQLNeedsNoGrantOnTheHistory(t *testing.T) {
	f := newFixture(t, series(t, "grants", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	_, err := f.c.Materialize(ctx, from, from.Add(time.Minute), WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE'`)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := "almanac_test_updater_" + hex.EncodeToString(b)
	admin := pgtest.Pool(t)
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA {{schema}} TO ` + role,
		`GRANT SELECT, UPDATE ON {{schema}}.slot TO ` + role,
	} {
		_, err := admin.Exec(ctx, sqlschema.Render(sql, f.db.Schema))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), sqlschema.Render(`DROP OWNED BY `+role+`; DROP ROLE `+role, f.db.Schema))
	})
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'redo'`, f.db.Schema))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, sqlschema.Render(`SELECT * FROM {{schema}}.slot_event`, f.db.Schema))
	require.Error(t, err, "the role cannot read the history itself")
	require.Equal(t, []briefly{{eventReopened, 2, role, "redo"}}, brief(f.history(from).Events))
}

// TestPlainSQLCannotHideReopens: a role that may only update slots sets
// almanac.engine = 'on', the setting almanac's own statements carry, and
// re-opens a slot: the trigger records it all the same, since the role
// could not have recorded it itself. Before, nothing was recorded.
func TestPlainSQLCannotHideReopens(t *testing.T) {
	f := newFixture(t, series(t, "hide", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	_, err := f.c.Materialize(ctx, from, from.Add(time.Minute), WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE'`)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := "almanac_test_hider_" + hex.EncodeToString(b)
	admin := pgtest.Pool(t)
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA {{schema}} TO ` + role,
		`GRANT SELECT, UPDATE ON {{schema}}.slot TO ` + role,
	} {
		_, err := admin.Exec(ctx, sqlschema.Render(sql, f.db.Schema))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), sqlschema.Render(`DROP OWNED BY `+role+`; DROP ROLE `+role, f.db.Schema))
	})
	conn := connectAs(t, role)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL almanac.engine = 'on'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'quietly'`, f.db.Schema))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []briefly{{eventReopened, 2, role, "quietly"}}, brief(f.history(from).Events))
}

// TestPruneHistory: events older than the schema's retention, on the
// database clock, are deleted in batches; others are kept.
func TestPruneHistory(t *testing.T) {
	f := newFixture(t, series(t, "prune", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	insert := func(age string, n int) {
		f.exec(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation)
			SELECT clock_timestamp() - $1::interval, 'prune', 'PT1M', '2026-01-01T00:00:00Z'::timestamptz + k * interval '1 minute', 'completed', 1
			FROM generate_series(1, $2) AS k`, age, n)
	}
	insert("91 days", 5)
	insert("89 days", 3)
	insert("1 hour", 2)
	prune := func(dryRun bool, batchSize int) int64 {
		t.Helper()
		n, err := pruneHistory(ctx, f.db.Pool, f.db.Schema, dryRun, batchSize)
		require.NoError(t, err)
		return n
	}
	n, err := PruneHistory(ctx, f.db.Pool, f.db.Schema, WriteOptions{DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	require.EqualValues(t, 10, f.exec(`SELECT FROM {{schema}}.slot_event`), "a dry run deletes nothing")
	require.EqualValues(t, 5, prune(false, 2), "in three batches")
	require.EqualValues(t, 0, prune(false, pruneBatchSize))

	f.exec(`UPDATE {{schema}}.settings SET history_retention = '1 day'`)
	require.EqualValues(t, 3, prune(false, pruneBatchSize))
	require.EqualValues(t, 2, f.exec(`SELECT FROM {{schema}}.slot_event`))

	_, err = PruneHistory(ctx, f.db.Pool, "bad\x00", WriteOptions{})
	require.ErrorIs(t, err, sqlschema.ErrInvalid)
}

// TestStatusLastNote: the last message written on an open slot, which a
// completion then clears; skip reasons are not notes.
func TestStatusLastNote(t *testing.T) {
	f := newFixture(t, series(t, "notes", "PT1M", "Europe/Berlin", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	at := func(i int) time.Time { return from.Add(time.Duration(i) * time.Minute) }
	_, err := f.c.Materialize(ctx, from, at(3), WriteOptions{})
	require.NoError(t, err)
	st, err := f.c.Status(ctx, from, at(3))
	require.NoError(t, err)
	require.Nil(t, st.LastNote)
	_, err = f.c.Skip(ctx, at(0), at(1), WriteOptions{Reason: "holiday"})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET fail_count = 1, message = 'timeout', not_before = 'infinity', updated_at = clock_timestamp() WHERE slot_start = $1`, at(1))
	st, err = f.c.Status(ctx, from, at(3))
	require.NoError(t, err)
	require.NotNil(t, st.LastNote)
	require.Equal(t, Note{Start: at(1), Status: statusAvailable, Parked: true, Message: "timeout", At: st.LastNote.At},
		Note{Start: st.LastNote.Start.UTC(), Status: st.LastNote.Status, Parked: st.LastNote.Parked, Message: st.LastNote.Message, At: st.LastNote.At})
	require.Equal(t, "Europe/Berlin", st.LastNote.At.Location().String())
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', message = NULL, not_before = NULL WHERE slot_start = $1`, at(1))
	st, err = f.c.Status(ctx, from, at(3))
	require.NoError(t, err)
	require.Nil(t, st.LastNote, "the skipped slot's reason is not a note")
}

// TestReopenCarriesTheCompletion: a worker's completion is recorded on the
// slot's row; Reopen moves it into the 'reopened' history row it writes,
// and History shows both, the completion with its run's owner, fence and
// attempt.
func TestReopenCarriesTheCompletion(t *testing.T) {
	f := newFixture(t, series(t, "carry", "PT1M", "UTC", time.Time{}), Options{Actor: "alice@laptop"})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	_, err := f.c.Materialize(ctx, from, from.Add(2*time.Minute), WriteOptions{})
	require.NoError(t, err)
	const owner = "0b9e3f55-2f0e-4c59-9d4b-8f5b7d1c2a10"
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', attempts = 2, fence = 7, completed_at = '2026-01-01T00:05:00Z',
		completed_by = $1`, owner) // as a worker records a completion
	before := f.history(from)
	require.Equal(t, []HistoryEvent{{At: utc("2026-01-01T00:05:00Z"), Event: eventCompleted, Generation: 1, Owner: owner, Fence: 7, Attempt: 2}},
		before.Events, "the row's completion is an event")

	_, err = f.c.Reopen(ctx, from, from.Add(2*time.Minute), WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	require.EqualValues(t, 2, f.exec(`SELECT FROM {{schema}}.slot_event WHERE event = 'reopened' AND completed_at IS NOT NULL`),
		"one history row per slot re-opened, carrying its completion")
	h := f.history(from)
	require.Len(t, h.Events, 2)
	require.Equal(t, before.Events[0], h.Events[0])
	require.Equal(t, briefly{eventReopened, 2, "alice@laptop", "late data"}, brief(h.Events[1:])[0])
	require.Equal(t, HistoryEvent{}, HistoryEvent{Owner: h.Events[1].Owner, Fence: h.Events[1].Fence, Attempt: h.Events[1].Attempt},
		"the re-open itself ended no run")
}

// historyReading returns the history of the slot at start and how many
// history rows the lookup read.
func (f *fixture) historyReading(start time.Time) (History, int64) {
	f.t.Helper()
	before := pgtest.RowsRead(f.t, f.db.Pool, f.db.Schema+".slot_event")
	h := f.history(start)
	return h, pgtest.RowsRead(f.t, f.db.Pool, f.db.Schema+".slot_event") - before
}

// TestHistoryFoundByBlockRanges: a slot's events are found through the
// block-range index on the history's slot starts, all of them, whether they
// lie in runs of pages already summarized or in the tail written since, among
// the events of other slots and series written around them, and the lookup
// reads a small part of the history, not all of it.
func TestHistoryFoundByBlockRanges(t *testing.T) {
	f := newFixture(t, series(t, "ranges", "PT1M", "UTC", time.Time{}), Options{})
	from := utc("2026-01-01T00:00:00Z")
	const slots = 20000
	// Three sweeps of re-opens over the series, as late data re-opening
	// window after window writes them, and one of another series at the
	// same starts.
	f.exec(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, message)
		SELECT $1::timestamptz + g * interval '1 hour' + k * interval '1 ms', CASE WHEN g = 0 THEN 'other' ELSE 'ranges' END, 'PT1M',
			$1::timestamptz + k * interval '1 minute', 'reopened', g + 1, 'sweep'
		FROM generate_series(0, 3) AS g, generate_series(0, $2 - 1) AS k ORDER BY g, k`, from, slots)
	// Failures of scattered slots, written in no order of their starts.
	f.exec(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, message)
		SELECT $1::timestamptz + interval '5 hours' + k * interval '1 ms', 'ranges', 'PT1M',
			$1::timestamptz + k * interval '1 minute', 'failed', 4, 'stray'
		FROM generate_series(0, $2 - 1, 97) AS k ORDER BY (k * 7919) % $2`, from, slots)
	f.exec(`SELECT brin_summarize_new_values('{{schema}}.slot_event_slot_idx')`)
	// The tail, written after the last summary.
	f.exec(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, message)
		SELECT $1::timestamptz + interval '6 hours' + k * interval '1 ms', 'ranges', 'PT1M',
			$1::timestamptz + k * interval '1 minute', 'released', 4, 'tail'
		FROM generate_series(0, $2 - 1, 500) AS k`, from, slots)
	f.exec(`ANALYZE {{schema}}.slot_event`)
	total := f.exec(`SELECT FROM {{schema}}.slot_event`)

	for _, k := range []int{0, 1, 291, 500, 12345, 19500, slots - 1} {
		want := []string{"sweep", "sweep", "sweep"}
		if k%97 == 0 {
			want = append(want, "stray")
		}
		if k%500 == 0 {
			want = append(want, "tail")
		}
		h, read := f.historyReading(from.Add(time.Duration(k) * time.Minute))
		var got []string
		for _, e := range h.Events {
			got = append(got, e.Message)
		}
		require.Equal(t, want, got, "slot %d", k)
		require.Less(t, read, total/4, "slot %d: the lookup read %d of %d history rows", k, read, total)
	}
}

// TestOperationsWriteHistoryInSlotOrder: a re-open, a skip or a retry of
// many slots writes their events in slot order, whatever the order of the slots' rows
// on disk, so that each run of history pages spans few slots and a lookup
// through the block-range index reads few of them.
func TestOperationsWriteHistoryInSlotOrder(t *testing.T) {
	f := newFixture(t, series(t, "ordered", "PT1M", "UTC", time.Time{}), Options{})
	ctx := context.Background()
	from := utc("2026-01-01T00:00:00Z")
	const slots = 20000
	to := from.Add(slots * time.Minute)
	// Rows on disk in no order of their starts, as a table whose rows have
	// been updated many times has them.
	f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, fence, attempts, completed_at)
		SELECT 'ordered', 'PT1M', $1::timestamptz + k * interval '1 minute', $1::timestamptz + (k + 1) * interval '1 minute',
			'COMPLETE', k + 1, 1, $1::timestamptz
		FROM generate_series(0, $2 - 1) AS k ORDER BY (k * 7919) % $2`, from, slots)
	// With statistics, the planner joins the slots to change by hashing,
	// and the rows come out of the update in the order of the table.
	f.exec(`ANALYZE {{schema}}.slot`)
	_, err := f.c.Reopen(ctx, from, to, WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	_, err = f.c.Skip(ctx, from, to, WriteOptions{Reason: "not needed"})
	require.NoError(t, err)
	// Parked by plain SQL, as a worker parks slots: recorded like any
	// change (a re-open of the SKIP slots), in the order of the table.
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT set_config('almanac.engine', 'on', true), set_config('almanac.actor', 'parker', true)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', not_before = 'infinity', fail_count = 3`, f.db.Schema))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	f.exec(`ANALYZE {{schema}}.slot`)
	_, err = f.c.Retry(ctx, from, to, WriteOptions{})
	require.NoError(t, err)

	var descents int64
	require.NoError(t, f.db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FILTER (WHERE slot_start < prev AND event = prev_event)
		FROM (SELECT slot_start, event, lag(slot_start) OVER w AS prev, lag(event) OVER w AS prev_event
			FROM {{schema}}.slot_event WHERE actor <> 'parker' WINDOW w AS (ORDER BY ctid)) e`, f.db.Schema)).Scan(&descents))
	require.Zero(t, descents, "each operation's events are written in slot order")

	f.exec(`SELECT brin_summarize_new_values('{{schema}}.slot_event_slot_idx')`)
	f.exec(`ANALYZE {{schema}}.slot_event`)
	total := f.exec(`SELECT FROM {{schema}}.slot_event`)
	for _, k := range []int{0, 7777, slots - 1} {
		h, read := f.historyReading(from.Add(time.Duration(k) * time.Minute))
		require.Len(t, h.Events, 4, "slot %d: re-opened, skipped, re-opened and parked, retried", k)
		require.Less(t, read, total/4, "slot %d: the lookup read %d of %d history rows", k, read, total)
	}
}
