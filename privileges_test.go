package almanac_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/migrations"
)

// TestLeastPrivilegeRoles sets up the two roles migrations.Grants describes
// and uses each for what it is for. The migration role, which owns the
// schema and has no privilege on the database, migrates the fresh schema.
// The runtime role, which cannot create anything, runs Migrate at start (a
// no-op that must not need CREATE: it did, on the database and the schema),
// registers series, drains locked- and lease-mode jobs through the Client,
// re-opens, skips, retries, materializes, reports status and compacts.
func TestLeastPrivilegeRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := pgtest.Pool(t)
	suffix := randomSuffix(t)
	schema := "almanac_test_" + suffix
	migrator, runtime := "almanac_test_migrator_"+suffix, "almanac_test_runtime_"+suffix
	for _, role := range []string{migrator, runtime} {
		_, err := admin.Exec(ctx, "CREATE ROLE "+sqlschema.Quote(role)+" LOGIN")
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlschema.Quote(schema)+" CASCADE")
		require.NoError(t, err)
		for _, role := range []string{runtime, migrator} {
			// DROP OWNED removes the role's grants and default privileges.
			_, err := admin.Exec(ctx, "DROP OWNED BY "+sqlschema.Quote(role))
			require.NoError(t, err)
			_, err = admin.Exec(ctx, "DROP ROLE "+sqlschema.Quote(role))
			require.NoError(t, err)
		}
	})
	grants, err := migrations.Grants(schema, runtime, migrator)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, grants)
	require.NoError(t, err)

	migratorPool := poolAs(t, migrator)
	runtimePool := poolAs(t, runtime)
	for _, role := range []string{migrator, runtime} {
		var canCreate bool
		require.NoError(t, admin.QueryRow(ctx, `SELECT has_database_privilege($1, current_database(), 'CREATE')`, role).Scan(&canCreate))
		require.False(t, canCreate, "%s may not create schemas", role)
	}

	// The migration role migrates the fresh schema.
	applied, err := migrations.Up(ctx, migratorPool, schema)
	require.NoError(t, err)
	require.Len(t, applied, len(migrations.All()))

	// What a later migration creates, as the migration role, the runtime
	// role may use without new grants.
	_, err = migratorPool.Exec(ctx, sqlschema.Render(`CREATE TABLE {{schema}}.later (id bigserial, note text);
		CREATE FUNCTION {{schema}}.later_note() RETURNS text LANGUAGE sql AS $$ SELECT 'later' $$`, schema))
	require.NoError(t, err)
	_, err = runtimePool.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.later (note) VALUES ({{schema}}.later_note());
		UPDATE {{schema}}.later SET note = 'x'; DELETE FROM {{schema}}.later`, schema))
	require.NoError(t, err, "default privileges cover later tables, sequences and functions")

	// The runtime role cannot change the schema...
	_, err = runtimePool.Exec(ctx, "CREATE TABLE "+sqlschema.Quote(schema)+".mine (x int)")
	requirePermissionDenied(t, err)
	_, err = runtimePool.Exec(ctx, "ALTER TABLE "+sqlschema.Quote(schema)+".slot ADD COLUMN x int")
	require.Error(t, err)
	_, err = runtimePool.Exec(ctx, "DROP TABLE "+sqlschema.Quote(schema)+".later")
	require.Error(t, err)
	_, err = migrations.Down(ctx, runtimePool, schema, 0)
	require.Error(t, err, "nor undo migrations")

	// ... but runs Migrate at every start, and everything else.
	c, err := almanac.New(runtimePool, almanac.Options{Schema: schema, Concurrency: 4, ShutdownTimeout: time.Second})
	require.NoError(t, err)
	_, err = c.Migrate(ctx)
	require.NoError(t, err, "Migrate on a current schema needs no DDL rights")
	locked, err := c.Series(ctx, "locked_report", "PT1H", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	leased, err := c.Series(ctx, "leased_report", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(6 * time.Hour)
	require.NoError(t, c.Register(almanac.Job{Series: locked, From: from, To: to,
		Handler: func(context.Context, pgx.Tx, almanac.Slot) error { return nil }}))
	require.NoError(t, c.Register(almanac.Job{Series: leased, From: from, To: to,
		LeaseHandler: func(context.Context, *acquire.Lease) error { return nil }}))
	summary, err := c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 12, summary.Completed, "%v", summary)

	for _, s := range []almanac.Series{locked, leased} {
		status, err := c.Status(ctx, s, from, to)
		require.NoError(t, err)
		require.EqualValues(t, 6, status.Complete)
		res, err := c.Reopen(ctx, s, from, from.Add(2*time.Hour), almanac.WriteOptions{Reason: "late data"})
		require.NoError(t, err)
		require.EqualValues(t, 2, res.Changed)
		skipped, err := c.Skip(ctx, s, from, from.Add(time.Hour), almanac.WriteOptions{Reason: "holiday"})
		require.NoError(t, err)
		require.EqualValues(t, 1, skipped.Changed)
		_, err = c.Retry(ctx, s, from, to, almanac.WriteOptions{})
		require.NoError(t, err)
		m, err := c.Materialize(ctx, s, to, to.Add(2*time.Hour), almanac.WriteOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 2, m.Inserted)
		gaps, err := c.Gaps(ctx, s, from, to.Add(3*time.Hour))
		require.NoError(t, err)
		require.Len(t, gaps, 1)
	}
	summary, err = c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, summary.Completed, "the re-opened slots, done again: %v", summary)

	// Compaction, and a re-open of compacted slots.
	compacted, err := c.Compact(ctx, to, almanac.WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 12, compacted.Changed)
	res, err := c.Reopen(ctx, locked, from, from.Add(time.Hour), almanac.WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Changed)

	// The series' frontier, which a worker draws from, in a transaction of
	// its own, while its searches come back full: a draw the role could not
	// make would go unnoticed (the worker falls back on its own floor).
	backlog, err := c.Series(ctx, "backlog_report", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	_, err = c.Materialize(ctx, backlog, from, from.Add(300*time.Minute), almanac.WriteOptions{})
	require.NoError(t, err)
	q, err := acquire.New(ctx, runtimePool, backlog, acquire.Options{Schema: schema})
	require.NoError(t, err)
	for range 3 {
		results, err := q.RunBatch(ctx, 100, func(context.Context, pgx.Tx, acquire.Slot) error { return nil })
		require.NoError(t, err)
		require.Len(t, results, 100)
	}
	var drawn int
	require.NoError(t, runtimePool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.slot_frontier WHERE name = 'backlog_report'`, schema)).Scan(&drawn))
	require.Equal(t, 1, drawn, "the runtime role drew from the series' frontier")

	// The series controls: a cap (locked-mode slots lock permit rows),
	// pause and resume (series_event) and a dependency (the table locked
	// while cycles are checked).
	capped, err := c.Series(ctx, "capped_report", "PT1H", almanac.SeriesOptions{MaxInFlight: 2})
	require.NoError(t, err)
	_, err = c.Pause(ctx, capped, "maintenance")
	require.NoError(t, err)
	_, err = c.Resume(ctx, capped, "done")
	require.NoError(t, err)
	// The series' trigger records both, as the owner, with the runtime
	// role's name (the client has no actor of its own).
	rows, err := runtimePool.Query(ctx, sqlschema.Render(`SELECT event || ' by ' || actor || ': ' || message FROM {{schema}}.series_event
		WHERE name = 'capped_report' ORDER BY at`, schema))
	require.NoError(t, err)
	seriesEvents, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"paused by " + runtime + ": maintenance", "resumed by " + runtime + ": done"}, seriesEvents)
	_, err = c.Materialize(ctx, capped, from, to, almanac.WriteOptions{})
	require.NoError(t, err)
	cq, err := acquire.New(ctx, runtimePool, capped, acquire.Options{Schema: schema})
	require.NoError(t, err)
	results, err := cq.RunBatch(ctx, 10, func(context.Context, pgx.Tx, acquire.Slot) error { return nil })
	require.NoError(t, err)
	require.Len(t, results, 2, "the cap admits 2 slots")
	_, err = c.Series(ctx, "capped_rollup", "P1D", almanac.SeriesOptions{After: []almanac.Series{capped}})
	require.NoError(t, err)

	// The runtime role cannot rewrite the record: it cannot write, erase or
	// alter the slots' or the series' history, record a version, shorten
	// the history's retention or forge a cap's permits...
	for _, sql := range []string{
		`INSERT INTO {{schema}}.slot_event (name, "interval", slot_start, event, generation, message)
			VALUES ('backlog_report', 'PT1M', '2026-03-01T00:00:00Z', 'failed', 1, 'forged')`,
		`DELETE FROM {{schema}}.slot_event`,
		`UPDATE {{schema}}.slot_event SET message = 'forged'`,
		`TRUNCATE {{schema}}.slot_event`,
		`INSERT INTO {{schema}}.schema_migrations (version, name) VALUES (99, 'fake')`,
		`UPDATE {{schema}}.schema_migrations SET applied_at = now()`,
		`DELETE FROM {{schema}}.schema_migrations WHERE version = 8`,
		`UPDATE {{schema}}.settings SET history_retention = '1 microsecond'`,
		`INSERT INTO {{schema}}.series_event (name, "interval", event, actor, message)
			VALUES ('capped_report', 'PT1H', 'resumed', 'ops', 'forged')`,
		`DELETE FROM {{schema}}.series_event`,
		`UPDATE {{schema}}.series_event SET message = 'forged'`,
		`TRUNCATE {{schema}}.series_event`,
		`INSERT INTO {{schema}}.series_permit (name, "interval", k) VALUES ('capped_report', 'PT1H', 3)`,
		`DELETE FROM {{schema}}.series_permit`,
		`TRUNCATE {{schema}}.series_permit`,
		`UPDATE {{schema}}.series_dependency SET up_name = 'leased_report'`,
		`TRUNCATE {{schema}}.series_dependency`,
	} {
		_, err := runtimePool.Exec(ctx, sqlschema.Render(sql, schema))
		requirePermissionDenied(t, err)
	}
	// ... nor keep a change out of it: almanac.engine, which let it skip
	// the plain-SQL trigger's record, now only skips the wake-up.
	tx, err := runtimePool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL almanac.engine = 'on'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'quietly'
		WHERE name = 'backlog_report' AND "interval" = 'PT1M' AND slot_start = $1`, schema), from)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	h, err := c.History(ctx, backlog, from)
	require.NoError(t, err)
	require.NotEmpty(t, h.Events, "the plain-SQL re-open is recorded")
	last := h.Events[len(h.Events)-1]
	require.Equal(t, []any{"reopened", int64(2), runtime, "quietly"}, []any{last.Event, last.Generation, last.Actor, last.Message},
		"the plain-SQL re-open is recorded, with the role that made it")

	// The engine's own history, written by the trigger for the runtime
	// role: a re-open, a skip, the re-open of a compacted slot.
	h, err = c.History(ctx, locked, from)
	require.NoError(t, err)
	var kinds []string
	for _, e := range h.Events {
		kinds = append(kinds, e.Event)
	}
	require.Equal(t, []string{"completed", "reopened", "skipped", "reopened"}, kinds)

	// ... but prunes what the retention allows, through the schema's
	// function, and still reads its history.
	_, err = admin.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation)
		VALUES (clock_timestamp() - interval '91 days', 'locked_report', 'PT1H', '2026-03-01T00:00:00Z', 'failed', 1)`, schema))
	require.NoError(t, err)
	pruned, err := c.PruneHistory(ctx, almanac.WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned)
	h, err = c.History(ctx, locked, from)
	require.NoError(t, err)
	require.NotEmpty(t, h.Events)
}

// poolAs returns a pool on the test server that logs in as role.
func poolAs(t *testing.T, role string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	u.User = url.User(role)
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	acquire.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func requirePermissionDenied(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "42501", pgErr.Code, "insufficient_privilege: %v", err)
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
