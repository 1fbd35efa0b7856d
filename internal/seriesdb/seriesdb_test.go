package seriesdb_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestAddManyWaitsOutARoleLockTimeout: registering series that another
// transaction is registering waits for it to commit, even as a role whose
// lock_timeout is short. The engines of a fleet start together and register
// the same series; before, the INSERT ran with the role's lock_timeout, and
// Start failed with SQLSTATE 55P03 (found by the chaos suite's
// TestChaosSeries).
func TestAddManyWaitsOutARoleLockTimeout(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	role := "role_" + strings.TrimPrefix(db.Schema, "almanac_test_")
	for _, sql := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, role),
		fmt.Sprintf(`ALTER ROLE %s SET lock_timeout = '50ms'`, role),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, db.Schema, role),
		fmt.Sprintf(`GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s`, db.Schema, role),
	} {
		_, err := db.Pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		_, _ = db.Pool.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	iv, err := slot.ParseInterval("PT1M")
	require.NoError(t, err)
	grid, err := slot.NewSeries("tenant_1", iv, time.UTC, time.Time{})
	require.NoError(t, err)

	// Another process registers the series and has not committed yet.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	_, err = tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin) VALUES ($1, $2, $3, $4)`,
		db.Schema), grid.Name(), "PT1M", "UTC", grid.Origin())
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := seriesdb.AddMany(ctx, pool, db.Schema, []slot.Series{grid})
		done <- err
	}()
	// Commit once the registration has waited for the lock longer than the
	// role's lock_timeout, by the database clock.
	deadline := time.Now().Add(30 * time.Second)
	for waited := false; !waited; {
		select {
		case err := <-done:
			t.Fatalf("AddMany returned before the other registration committed: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "AddMany never waited for the lock")
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE usename = $1
			AND wait_event_type = 'Lock' AND query_start < clock_timestamp() - interval '250 milliseconds')`, role).Scan(&waited))
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("AddMany did not return after the other registration committed")
	}
}
