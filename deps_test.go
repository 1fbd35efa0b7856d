package almanac_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestDependencies: a P1D report in Europe/Berlin after a PT1H ingest. The
// report's 23-hour DST day is due only once all 23 ingest hours are done
// (a missing hour is not done); a re-open of one ingest hour, by plain SQL
// or through the API, re-opens the report's day as a new generation and
// on down to a weekly summary after the report, with the cause in the
// history; a cycle is refused, naming it.
func TestDependencies(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	ingest, err := c.Series(ctx, "ingest", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	report, err := c.Series(ctx, "report", "P1D", almanac.SeriesOptions{TimeZone: "Europe/Berlin", After: []almanac.Series{ingest}})
	require.NoError(t, err)
	weekly, err := c.Series(ctx, "weekly", "P1W", almanac.SeriesOptions{TimeZone: "Europe/Berlin", After: []almanac.Series{report}})
	require.NoError(t, err)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(t, err)
	}
	count := func(sql string, args ...any) (n int) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(sql, db.Schema), args...).Scan(&n))
		return n
	}

	info, err := c.LookupSeries(ctx, "report", "P1D")
	require.NoError(t, err)
	require.Len(t, info.After, 1)
	require.Equal(t, "ingest", info.After[0].Name())
	infos, err := c.ListSeries(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 3)
	require.Equal(t, "weekly", infos[2].Series.Name())
	require.Len(t, infos[2].After, 1)
	require.Equal(t, report.String(), infos[2].After[0].String(), "weekly is after the report")
	_, err = c.SetSeries(ctx, ingest, almanac.SeriesOptions{After: []almanac.Series{weekly}})
	require.ErrorIs(t, err, almanac.ErrInvalid)
	require.ErrorContains(t, err, "ingest PT1H → weekly P1W → report P1D → ingest PT1H")
	info, err = c.LookupSeries(ctx, "ingest", "PT1H")
	require.NoError(t, err)
	require.Empty(t, info.After, "a refused cycle changes nothing")

	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	day := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin) // 23 hours
	next := day.AddDate(0, 0, 1)
	_, err = c.Materialize(ctx, report, day, next, almanac.WriteOptions{})
	require.NoError(t, err)
	_, err = c.Materialize(ctx, ingest, day, next.Add(-time.Hour), almanac.WriteOptions{})
	require.NoError(t, err)
	require.Equal(t, 22, count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'ingest'`))
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE name = 'ingest'`)

	ran := 0
	drain := func() {
		t.Helper()
		d, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
		require.NoError(t, err)
		require.NoError(t, d.Register(almanac.Job{Series: report, From: day, To: next,
			Handler: func(context.Context, pgx.Tx, almanac.Slot) error { ran++; return nil }}))
		_, _ = d.Drain(ctx)
	}
	drain()
	require.Zero(t, ran, "22 of 23 ingest hours done: the report's day is not due")
	st, err := c.Status(ctx, report, day, next)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.WaitingUpstream)
	require.Equal(t, int64(1), st.Available)
	_, err = c.Materialize(ctx, ingest, next.Add(-time.Hour), next, almanac.WriteOptions{})
	require.NoError(t, err)
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE name = 'ingest'`)
	st, err = c.Status(ctx, report, day, next)
	require.NoError(t, err)
	require.Zero(t, st.WaitingUpstream)
	drain()
	require.Equal(t, 1, ran, "all 23 hours done")

	// The weekly summary of that week, finished.
	week := time.Date(2026, 3, 23, 0, 0, 0, 0, berlin)
	_, err = c.Materialize(ctx, weekly, week, week.AddDate(0, 0, 7), almanac.WriteOptions{})
	require.NoError(t, err)
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE name = 'weekly'`)

	// Plain SQL re-opens one ingest hour: the report's day and the week
	// follow, as new generations.
	exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late rows' WHERE name = 'ingest' AND slot_start = $1`, day.Add(5*time.Hour))
	var status, message string
	var generation int64
	require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT status, message, generation FROM {{schema}}.slot
		WHERE name = 'report' AND slot_start = $1`, db.Schema), day).Scan(&status, &message, &generation))
	require.Equal(t, "AVAILABLE", status)
	require.Equal(t, int64(2), generation)
	require.Contains(t, message, "upstream ingest 2026-03-29T04:00:00Z/PT1H re-opened")
	require.Equal(t, "AVAILABLE", func() string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT status FROM {{schema}}.slot WHERE name = 'weekly'`, db.Schema)).Scan(&s))
		return s
	}(), "transitively")
	h, err := c.History(ctx, report, day)
	require.NoError(t, err)
	require.Equal(t, "reopened", h.Events[len(h.Events)-1].Event)
	require.Contains(t, h.Events[len(h.Events)-1].Message, "upstream ingest")

	// Through the API (almanac's own transaction): the same, with the
	// event written by the trigger.
	exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE status = 'AVAILABLE'`)
	res, err := c.Reopen(ctx, ingest, day.Add(7*time.Hour), day.Add(8*time.Hour), almanac.WriteOptions{Reason: "late"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Changed)
	require.Equal(t, 1, count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'report' AND status = 'AVAILABLE' AND generation = 3`))
	require.Equal(t, 1, count(`SELECT count(*) FROM {{schema}}.slot WHERE name = 'weekly' AND status = 'AVAILABLE' AND generation = 3`))
	require.Equal(t, 1, count(`SELECT count(*) FROM {{schema}}.slot_event WHERE name = 'weekly' AND event = 'reopened'
		AND message LIKE 'upstream report%' AND generation = 3`))
}

// TestReopenDownstreamRecordedOnce: a re-open that travels down the graph
// is recorded once per downstream slot and generation, whoever re-opens:
// plain SQL, almanac's own transaction (almanac.engine on), and a role
// that may only update slots and sets almanac.engine on anyway (the
// setting is not honoured for it, migration 8, and the downstream
// re-opens are still recorded once, not twice or never).
func TestReopenDownstreamRecordedOnce(t *testing.T) {
	ctx := context.Background()
	db, c, ingest, report, day := ingestAndReport(t)
	_, err := c.Series(ctx, "weekly", "P1W", almanac.SeriesOptions{After: []almanac.Series{report}})
	require.NoError(t, err)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(t, err)
	}
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status)
		VALUES ('weekly', 'P1W', '2026-03-02T00:00:00Z', '2026-03-09T00:00:00Z', 'AVAILABLE') ON CONFLICT DO NOTHING`)
	role := "almanac_test_reopener_" + db.Schema
	exec(`CREATE ROLE ` + sqlschema.Quote(role))
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DROP OWNED BY `+sqlschema.Quote(role))
		_, _ = db.Pool.Exec(context.Background(), `DROP ROLE `+sqlschema.Quote(role))
	})
	exec(`GRANT USAGE ON SCHEMA {{schema}} TO ` + sqlschema.Quote(role) + `; GRANT SELECT, UPDATE ON {{schema}}.slot TO ` + sqlschema.Quote(role))

	complete := func() {
		t.Helper()
		exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now()`)
	}
	// once checks that the downstream slots are open at generation g with
	// exactly one 'reopened' event each for it.
	once := func(g int, how string) {
		t.Helper()
		var n, events int
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*),
			(SELECT count(*) FROM {{schema}}.slot_event e WHERE e.name IN ('report', 'weekly') AND e.event = 'reopened' AND e.generation = $1)
			FROM {{schema}}.slot WHERE name IN ('report', 'weekly') AND status = 'AVAILABLE' AND generation = $1`, db.Schema), g).Scan(&n, &events))
		require.Equal(t, 2, n, "%s: the day and the week re-opened", how)
		require.Equal(t, 2, events, "%s: one event per re-opened downstream slot", how)
	}

	complete()
	exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE name = 'ingest' AND slot_start = $1`, day.Add(time.Hour))
	once(2, "plain SQL")

	complete()
	_, err = c.Reopen(ctx, ingest, day.Add(2*time.Hour), day.Add(3*time.Hour), almanac.WriteOptions{Reason: "late"})
	require.NoError(t, err)
	once(3, "the API")

	complete()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL ROLE `+sqlschema.Quote(role)+`; SET LOCAL almanac.engine = 'on'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE name = 'ingest' AND slot_start = $1`, db.Schema), day.Add(4*time.Hour))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	once(4, "a role that may not insert history, with almanac.engine on")
	var own int
	require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.slot_event
		WHERE name = 'ingest' AND slot_start = $1 AND event = 'reopened'`, db.Schema), day.Add(4*time.Hour)).Scan(&own))
	require.Equal(t, 1, own, "the role's own re-open is recorded whatever it sets")
}

// TestReopenAndCompactedSlots: a re-open that would reach downstream slots
// that exist only in a compacted range is refused, by the API and by plain
// SQL, naming them, and changes nothing; once the downstream slots are
// brought back (a re-open of them), it goes through. Re-opening compacted
// upstream slots (whose rows come back by INSERT) re-opens the downstream
// slots after them as a new generation.
func TestReopenAndCompactedSlots(t *testing.T) {
	ctx := context.Background()
	db, c, ingest, report, day := ingestAndReport(t)
	next := day.AddDate(0, 0, 1)
	exec := func(sql string, args ...any) error {
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		return err
	}
	row := func(name string) (status string, generation int64) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT status, generation FROM {{schema}}.slot
			WHERE name = $1 ORDER BY slot_start LIMIT 1`, db.Schema), name).Scan(&status, &generation))
		return status, generation
	}
	require.NoError(t, exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now()`))
	_, err := c.Compact(ctx, next, almanac.WriteOptions{}, report)
	require.NoError(t, err)

	_, err = c.Reopen(ctx, ingest, day.Add(5*time.Hour), day.Add(6*time.Hour), almanac.WriteOptions{Reason: "late"})
	require.ErrorContains(t, err, "downstream series report P1D has compacted slots in [2026-03-04T00:00:00Z, 2026-03-05T00:00:00Z)")
	require.ErrorIs(t, err, almanac.ErrInvalid, "a refusal the caller can act on (the CLI exits 2)")
	require.ErrorContains(t, err, "Re-open those downstream slots first")
	err = exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE name = 'ingest' AND slot_start = $1`, day.Add(5*time.Hour))
	require.ErrorContains(t, err, "has compacted slots")
	status, _ := row("ingest")
	require.Equal(t, "COMPLETE", status, "a refused re-open changes nothing")

	_, err = c.Reopen(ctx, report, day, next, almanac.WriteOptions{Reason: "bring back"})
	require.NoError(t, err)
	require.NoError(t, exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE name = 'report'`))
	_, err = c.Reopen(ctx, ingest, day.Add(5*time.Hour), day.Add(6*time.Hour), almanac.WriteOptions{Reason: "late"})
	require.NoError(t, err)
	status, gen := row("report")
	require.Equal(t, "AVAILABLE", status)
	require.Equal(t, int64(3), gen, "brought back as 2, re-opened by the upstream as 3")

	// Compacted upstream slots: their re-open brings their rows back and
	// re-opens the report's day.
	require.NoError(t, exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now()`))
	_, err = c.Compact(ctx, next, almanac.WriteOptions{}, ingest)
	require.NoError(t, err)
	res, err := c.Reopen(ctx, ingest, day.Add(7*time.Hour), day.Add(8*time.Hour), almanac.WriteOptions{Reason: "late"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Changed)
	status, gen = row("report")
	require.Equal(t, "AVAILABLE", status)
	require.Equal(t, int64(4), gen)
	h, err := c.History(ctx, report, day)
	require.NoError(t, err)
	require.Contains(t, h.Events[len(h.Events)-1].Message, "upstream ingest 2026-03-04T07:00:00Z/PT1H re-opened")
}

// ingestAndReport is a schema with a PT1H ingest series and a P1D report
// after it, and the slots of both materialized over one UTC day, returned.
func ingestAndReport(t *testing.T) (db *pgtest.DB, c *almanac.Client, ingest, report almanac.Series, day time.Time) {
	t.Helper()
	ctx := context.Background()
	db = pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	ingest, err = c.Series(ctx, "ingest", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	report, err = c.Series(ctx, "report", "P1D", almanac.SeriesOptions{After: []almanac.Series{ingest}})
	require.NoError(t, err)
	day = time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	for _, s := range []almanac.Series{ingest, report} {
		_, err = c.Materialize(ctx, s, day, day.AddDate(0, 0, 1), almanac.WriteOptions{})
		require.NoError(t, err)
	}
	return db, c, ingest, report, day
}
