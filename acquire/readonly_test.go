package acquire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// roleFixture is a login role of the fixture's own with every right on
// its schema, and a pool that connects as it; the role is dropped at the
// end of the test.
func (f *fixture) roleFixture(maxConns int32) (role string, pool *pgxpool.Pool) {
	f.t.Helper()
	ctx := context.Background()
	role = "role_" + strings.TrimPrefix(f.schema, "almanac_test_")
	for _, sql := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, role),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, f.schema, role),
		fmt.Sprintf(`GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s`, f.schema, role),
		fmt.Sprintf(`GRANT ALL ON ALL SEQUENCES IN SCHEMA %s TO %s`, f.schema, role),
	} {
		_, err := f.db.Pool.Exec(ctx, sql)
		require.NoError(f.t, err, sql)
	}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(f.t))
	require.NoError(f.t, err)
	cfg.ConnConfig.User = role
	cfg.MaxConns = maxConns
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(f.t, err)
	f.t.Cleanup(func() {
		pool.Close()
		_, _ = f.db.Pool.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	return role, pool
}

// TestOutcomeWriteWaitsOutAReadOnlyServer: a lease's outcome write that
// meets a read-only server (SQLSTATE 25006, as from a primary being
// demoted or fenced) is repeated like one that lost its connection, on a
// new connection, and lands once the server takes writes again. Before,
// Finish gave up at once with the error, and the slot ran again after its
// lease expired.
func TestOutcomeWriteWaitsOutAReadOnlyServer(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	role, pool := f.roleFixture(4)
	q := f.queueOn(pool, Options{})
	leases, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1)

	// The role's new sessions are read-only; the pool's are all new.
	f.exec(fmt.Sprintf(`ALTER ROLE %s SET default_transaction_read_only = on`, role))
	pool.Reset()

	refused := make(chan struct{})
	var once sync.Once
	rctx := retry.OnRetry(ctx, func(err error, _ int, _ time.Duration) {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "25006" {
			once.Do(func() { close(refused) })
		}
	})
	rctx, cancel := context.WithTimeout(rctx, 30*time.Second)
	defer cancel()
	type finished struct {
		outcome Outcome
		err     error
	}
	done := make(chan finished, 1)
	go func() {
		outcome, _, err := leases[0].Finish(rctx, nil)
		done <- finished{outcome, err}
	}()
	select {
	case <-refused:
	case res := <-done:
		t.Fatalf("the write ended before the server took writes again: %s, %v", res.outcome, res.err)
	}
	require.Equal(t, "ACQUIRED", f.row(leases[0].Start).Status, "a refused write changed nothing")

	f.exec(fmt.Sprintf(`ALTER ROLE %s RESET default_transaction_read_only`, role))
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, Completed, res.outcome)
	require.Equal(t, "COMPLETE", f.row(leases[0].Start).Status)
}
