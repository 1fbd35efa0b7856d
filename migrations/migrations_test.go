package migrations_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func tableExists(t *testing.T, schema, table string) bool {
	var ok bool
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`,
		sqlschema.Quote(schema)+"."+table).Scan(&ok))
	return ok
}

func TestUpDownStatus(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	require.ErrorIs(t, migrations.Require(ctx, pool, schema), migrations.ErrNotMigrated)
	states, err := migrations.Status(ctx, pool, schema)
	require.NoError(t, err)
	require.False(t, !states[0].AppliedAt.IsZero())

	applied, err := migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	require.Len(t, applied, len(migrations.All()))
	require.NoError(t, migrations.Require(ctx, pool, schema))
	for _, table := range []string{"series", "slot", "schema_migrations", "fence_seq"} {
		require.True(t, tableExists(t, schema, table), table)
	}

	applied, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	require.Empty(t, applied, "re-running applies nothing")

	// A user object in the schema survives a full down, and keeps the schema.
	_, err = pool.Exec(ctx, "CREATE TABLE "+sqlschema.Quote(schema)+".mine (x int)")
	require.NoError(t, err)
	undone, err := migrations.Down(ctx, pool, schema, 0)
	require.NoError(t, err)
	require.Len(t, undone, len(migrations.All()))
	require.False(t, tableExists(t, schema, "slot"))
	require.False(t, tableExists(t, schema, "schema_migrations"))
	require.True(t, tableExists(t, schema, "mine"))

	undone, err = migrations.Down(ctx, pool, schema, 0)
	require.NoError(t, err)
	require.Empty(t, undone)
	_, err = migrations.Down(ctx, pool, schema, len(migrations.All())+1)
	require.Error(t, err)
}

func TestConcurrentUp(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	counts := make([]int, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied, err := migrations.Up(ctx, pool, schema)
			errs[i], counts[i] = err, len(applied)
		}()
	}
	wg.Wait()
	total := 0
	for i := range errs {
		require.NoError(t, errs[i])
		total += counts[i]
	}
	require.Equal(t, len(migrations.All()), total, "each migration is applied exactly once")
}

// TestPrintedSQLMatchesMigrator applies the printed script by hand and
// checks the migrator then considers the schema current.
func TestPrintedSQLMatchesMigrator(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t) + `"q`
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+sqlschema.Quote(schema)+" CASCADE")
	})
	script, err := migrations.SQL(schema)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, script)
	require.NoError(t, err)
	require.NoError(t, migrations.Require(ctx, pool, schema))
	applied, err := migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	require.Empty(t, applied)

	_, err = migrations.SQL("")
	require.ErrorIs(t, err, sqlschema.ErrInvalid)
}

// TestHostileRoleSettings: a role whose sessions default to serializable
// isolation and tiny timeouts still migrates.
func TestHostileRoleSettings(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET default_transaction_isolation = serializable; SET statement_timeout = '1ms'; SET lock_timeout = '1ms'`)
	require.NoError(t, err)
	defer conn.Exec(context.Background(), `RESET default_transaction_isolation; RESET statement_timeout; RESET lock_timeout`) //nolint:errcheck
	_, err = migrations.Up(ctx, conn.Conn(), schema)
	require.NoError(t, err)
	require.NoError(t, migrations.Require(ctx, conn.Conn(), schema))
}

// FuzzGrants: the role and schema names, free text on the command line,
// either are refused or appear in the SQL only as quoted identifiers.
func FuzzGrants(f *testing.F) {
	for _, s := range [][3]string{{"almanac", "app", "owner"}, {"pg_catalog", "app", "owner"}, {"almanac", "pg_monitor", "owner"},
		{`x"; DROP SCHEMA public; --`, `a"b`, "o"}, {"almanac", "same", "same"}, {"a\x00", "b", "c"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, schema, runtime, migrator string) {
		sql, err := migrations.Grants(schema, runtime, migrator)
		if err != nil {
			if !errors.Is(err, sqlschema.ErrInvalid) && !errors.Is(err, sqlschema.ErrInvalidRole) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error for %q %q %q is not a one-line invalid name: %v", schema, runtime, migrator, err)
			}
			return
		}
		// With every quoted name taken out, longest first (one may hold
		// another), no quote is left over.
		quoted := []string{sqlschema.Quote(schema), sqlschema.Quote(runtime), sqlschema.Quote(migrator)}
		sort.Slice(quoted, func(i, j int) bool { return len(quoted[i]) > len(quoted[j]) })
		rest := sql
		for _, q := range quoted {
			rest = strings.ReplaceAll(rest, q, "")
		}
		if strings.Contains(rest, `"`) {
			t.Fatalf("unbalanced quoting for %q %q %q:\n%s", schema, runtime, migrator, sql)
		}
	})
}

// TestWakeChannelInSQL: the schema's wake_channel() is the channel workers
// listen on, whatever the schema is called.
func TestWakeChannelInSQL(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, suffix := range []string{"", `"q'$$x`, " Ünï ; --"} {
		schema := pgtest.Schema(t) + suffix
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+sqlschema.Quote(schema)+" CASCADE")
		})
		_, err := migrations.Up(ctx, pool, schema)
		require.NoError(t, err)
		var channel string
		require.NoError(t, pool.QueryRow(ctx, "SELECT "+sqlschema.Quote(schema)+".wake_channel()").Scan(&channel))
		require.Equal(t, wake.Channel(schema), channel, schema)
	}
}

// TestDownFromCompletionsKeepsHistory: going back below version 4 turns the
// completions recorded on rows and carried by re-open events into the
// 'completed' history rows version 3 expects.
func TestDownFromCompletionsKeepsHistory(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sqlschema.Render(sql, schema))
		require.NoError(t, err)
	}
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, fence, attempts, generation, completed_at, completed_by)
		VALUES ('s', 'PT1M', '2026-01-01T00:00Z', '2026-01-01T00:01Z', 'COMPLETE', 9, 1, 2, '2026-01-01T00:09Z', '0b9e3f55-2f0e-4c59-9d4b-8f5b7d1c2a10')`)
	exec(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt, completed_at)
		VALUES ('2026-01-01T00:08Z', 's', 'PT1M', '2026-01-01T00:00Z', 'reopened', 2, '0b9e3f55-2f0e-4c59-9d4b-8f5b7d1c2a10', 5, 3, '2026-01-01T00:04Z')`)
	var before []string
	rows, err := pool.Query(ctx, sqlschema.Render(`SELECT format('%s %s g%s %s f%s a%s', at AT TIME ZONE 'UTC', event, generation, owner, fence, attempt)
		FROM {{schema}}.slot_history ORDER BY at`, schema))
	require.NoError(t, err)
	before, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, before, 3)

	_, err = migrations.Down(ctx, pool, schema, 3)
	require.NoError(t, err)
	rows, err = pool.Query(ctx, sqlschema.Render(`SELECT format('%s %s g%s %s f%s a%s', at AT TIME ZONE 'UTC', event, generation,
		CASE WHEN event = 'completed' THEN owner END, CASE WHEN event = 'completed' THEN fence END, attempt)
		FROM {{schema}}.slot_event ORDER BY at`, schema))
	require.NoError(t, err)
	after, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, before, after, "the same events, as version 3 rows")
}

// TestDownBelowRangesKeepsCompactedSlots: undoing migration 3 while
// compacted ranges exist is refused, with nothing undone past it: their
// slots have no row and would become gaps that workers run again. Once the
// ranges are gone (re-opened, or deleted to discard them) it goes through,
// and a round trip down to 2 and up again keeps the history exactly.
func TestDownBelowRangesKeepsCompactedSlots(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sqlschema.Render(sql, schema))
		require.NoError(t, err)
	}
	exec(`INSERT INTO {{schema}}.slot_compacted (name, "interval", range_start, range_end, status, generation, completed_at)
		VALUES ('s', 'PT1M', '2026-01-01T00:00Z', '2026-01-01T01:00Z', 'COMPLETE', 1, '2026-01-01T02:00Z')`)
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, fence, attempts, generation, completed_at, completed_by)
		VALUES ('s', 'PT1M', '2026-01-01T01:00Z', '2026-01-01T01:01Z', 'COMPLETE', 9, 1, 2, '2026-01-01T01:09Z', '0b9e3f55-2f0e-4c59-9d4b-8f5b7d1c2a10')`)
	exec(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt, completed_at)
		VALUES ('2026-01-01T01:08Z', 's', 'PT1M', '2026-01-01T01:00Z', 'reopened', 2, '0b9e3f55-2f0e-4c59-9d4b-8f5b7d1c2a10', 5, 3, '2026-01-01T01:04Z')`)
	history := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, sqlschema.Render(`SELECT format('%s %s g%s', at AT TIME ZONE 'UTC', event, generation)
			FROM {{schema}}.slot_history ORDER BY at`, schema))
		require.NoError(t, err)
		h, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return h
	}
	before := history()
	require.Len(t, before, 3)

	undone, err := migrations.Down(ctx, pool, schema, 2)
	require.ErrorContains(t, err, "cannot undo migration 3: 1 compacted range(s)")
	require.Empty(t, undone, "nothing is undone")
	require.NoError(t, migrations.Require(ctx, pool, schema))
	require.True(t, tableExists(t, schema, "slot_compacted"), "the ranges are kept")
	// The printed SQL, run by hand, stops at migration 3 too.
	states, err := migrations.Status(ctx, pool, schema)
	require.NoError(t, err)
	script, err := migrations.DownPlan(schema, states, 2)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, script)
	require.ErrorContains(t, err, "cannot undo migration 3: 1 compacted range(s)")
	require.True(t, tableExists(t, schema, "slot_compacted"), "the ranges are kept")

	exec(`DELETE FROM {{schema}}.slot_compacted`)
	_, err = migrations.Down(ctx, pool, schema, 2)
	require.NoError(t, err)
	_, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	require.Equal(t, before, history(), "a round trip below version 3 neither loses nor doubles an event")
}

// TestSeriesHistoryTrigger: from version 12 the series' history is written
// by the series table's trigger, for the changes that pause or resume a
// series (plain SQL included), and no other role may insert into it; the
// down migration gives INSERT back to the roles that may update series
// rows, and to no other.
func TestSeriesHistoryTrigger(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := migrations.Up(ctx, pool, schema, 11)
	require.NoError(t, err)
	writer, reader := schema+"_writer", schema+"_reader"
	for _, role := range []string{writer, reader} {
		_, err := pool.Exec(ctx, "CREATE ROLE "+sqlschema.Quote(role))
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx := context.Background()
			_, err := pool.Exec(ctx, "DROP OWNED BY "+sqlschema.Quote(role))
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "DROP ROLE "+sqlschema.Quote(role))
			require.NoError(t, err)
		})
	}
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sqlschema.Render(sql, schema))
		require.NoError(t, err)
	}
	exec(`GRANT SELECT, INSERT, UPDATE ON {{schema}}.series, {{schema}}.series_event TO ` + sqlschema.Quote(writer) + `;
		GRANT SELECT ON {{schema}}.series, {{schema}}.series_event TO ` + sqlschema.Quote(reader))
	canInsert := func(role string) bool {
		t.Helper()
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT has_table_privilege($1, $2, 'INSERT')`, role,
			sqlschema.Quote(schema)+".series_event").Scan(&ok))
		return ok
	}

	_, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	require.False(t, canInsert(writer), "version 12 takes INSERT on series_event back")
	exec(`INSERT INTO {{schema}}.series (name, "interval", origin) VALUES ('s', 'PT1M', '2026-01-01T00:00Z')`)
	exec(`UPDATE {{schema}}.series SET paused_at = now(), paused_reason = 'by hand'`)
	exec(`UPDATE {{schema}}.series SET paused_reason = 'by hand', lag = interval '1 minute'`) // no change to the pause
	exec(`UPDATE {{schema}}.series SET paused_reason = 'still'`)
	exec(`BEGIN; SELECT set_config('almanac.actor', 'ops', true), set_config('almanac.reason', 'back', true);
		UPDATE {{schema}}.series SET paused_at = NULL, paused_reason = NULL; COMMIT`)
	exec(`UPDATE {{schema}}.series SET paused_at = NULL`) // not paused: nothing to record
	var role string
	require.NoError(t, pool.QueryRow(ctx, `SELECT session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')`).Scan(&role))
	rows, err := pool.Query(ctx, sqlschema.Render(`SELECT event || ' by ' || actor || ': ' || message FROM {{schema}}.series_event ORDER BY at`, schema))
	require.NoError(t, err)
	events, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"paused by " + role + ": by hand", "paused by " + role + ": still", "resumed by ops: back"}, events)

	_, err = migrations.Down(ctx, pool, schema, 11)
	require.NoError(t, err)
	require.True(t, canInsert(writer), "version 11's grants are back")
	require.False(t, canInsert(reader), "for the roles that had it")
	exec(`UPDATE {{schema}}.series SET paused_at = now()`)
	var n int
	require.NoError(t, pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.series_event`, schema)).Scan(&n))
	require.Equal(t, 3, n, "version 11 has no trigger")
}
