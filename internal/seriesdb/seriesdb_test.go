package seriesdb_test

import (
	"context"
	"fmt"
	"strings"
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

// TestWritersWaitOutARoleLockTimeout: registering series, and setting
// their upstream series, wait for another transaction doing the same to
// commit, even as a role whose lock_timeout is short. The engines of a
// fleet start together and register the same series (and dependencies);
// with the role's lock_timeout, Start failed with SQLSTATE 55P03 (found by
// the chaos suite's TestChaosSeries).
func TestWritersWaitOutARoleLockTimeout(t *testing.T) {
	iv, err := slot.ParseInterval("PT1M")
	require.NoError(t, err)
	grid, err := slot.NewSeries("tenant_1", iv, time.UTC, time.Time{})
	require.NoError(t, err)
	up, err := slot.NewSeries("ingest", iv, time.UTC, time.Time{})
	require.NoError(t, err)
	register := `INSERT INTO {{schema}}.series (name, "interval", time_zone, origin) VALUES ($1, 'PT1M', 'UTC', $2)`

	t.Run("AddMany", func(t *testing.T) {
		db, pool, role := lockTimeoutRole(t)
		waitsOut(t, db, role, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sqlschema.Render(register, db.Schema), grid.Name(), grid.Origin())
			return err
		}, func(ctx context.Context) error {
			_, err := seriesdb.AddMany(ctx, pool, db.Schema, []slot.Series{grid})
			return err
		})
	})
	t.Run("SetAfter", func(t *testing.T) {
		db, pool, role := lockTimeoutRole(t)
		ctx := context.Background()
		for _, g := range []slot.Series{grid, up} {
			_, err := db.Pool.Exec(ctx, sqlschema.Render(register, db.Schema), g.Name(), g.Origin())
			require.NoError(t, err)
		}
		waitsOut(t, db, role, func(ctx context.Context, tx pgx.Tx) error {
			return seriesdb.SetAfter(ctx, pgxTx{tx}, db.Schema, grid.Name(), iv, []slot.Series{up})
		}, func(ctx context.Context) error {
			return seriesdb.SetAfter(ctx, pool, db.Schema, grid.Name(), iv, []slot.Series{up})
		})
	})
}

// pgxTx begins nested transactions (savepoints) of a transaction, so that
// SetAfter can run inside one the test holds open.
type pgxTx struct{ tx pgx.Tx }

func (p pgxTx) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) { return p.tx.Begin(ctx) }

// lockTimeoutRole returns a test database and a pool of a role whose
// lock_timeout is 50 ms, with every right on the database's tables.
func lockTimeoutRole(t *testing.T) (*pgtest.DB, *pgxpool.Pool, string) {
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
	return db, pool, role
}

// waitsOut holds a transaction that did first (as the owner) while call
// runs as role, and commits it once call has waited for its lock longer
// than the role's lock_timeout, by the database clock; call must then
// succeed.
func waitsOut(t *testing.T, db *pgtest.DB, role string, first func(context.Context, pgx.Tx) error, call func(context.Context) error) {
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	require.NoError(t, first(ctx, tx))

	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for waited := false; !waited; {
		select {
		case err := <-done:
			t.Fatalf("returned before the other transaction committed: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "never waited for the lock")
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE usename = $1
			AND wait_event_type = 'Lock' AND query_start < clock_timestamp() - interval '250 milliseconds')`, role).Scan(&waited))
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("did not return after the other transaction committed")
	}
}
