//go:build linux

package topology

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/demo/pgcluster"
)

// TestConnectionsPerProcess counts, on a server of its own, the
// connections one process opens: the sidecar with 1, 4 and 16 workers, and
// the Client with a locked-mode job of concurrency 1, 4 and 16 on a pool
// of concurrency + 3. It logs the peak while slots are worked and checks
// the budget docs/scaling.md states: the sidecar at most workers + 5
// (workers, two reserved for outcome writes and heartbeats, one for
// materializing, one spare, one LISTEN), the Client at most its pool's
// MaxConns plus its LISTEN connection.
func TestConnectionsPerProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := StartCluster(ctx, pgcluster.FastSettings)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Destroy() })
	url := c.URL("postgres")
	probe, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer probe.Close(ctx)
	// peak samples the client backends (but its own and the probe's)
	// every 20 ms until stop.
	peak := func(stop <-chan struct{}) func() int {
		sampler, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		var max atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			defer sampler.Close(ctx)
			for {
				var n int64
				err := sampler.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> $1`, probe.PgConn().PID()).Scan(&n)
				if err == nil && n > max.Load() {
					max.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
		return func() int { wg.Wait(); return int(max.Load()) }
	}

	for _, workers := range []int{1, 4, 16} {
		w := newWorkload(t, url, fmt.Sprintf("almanac_conns_sidecar_%d", workers), "report", 8*workers)
		w.admin.Close() // the sidecar's connections alone are counted
		stop := make(chan struct{})
		result := peak(stop)
		s := w.sidecar("sidecar", url, 0.2, "--workers", fmt.Sprint(workers))
		waitFor(t, s, 2*time.Minute, "all slots complete", func() bool {
			var n int
			return probe.QueryRow(ctx, `SELECT count(*) FROM `+w.table("slot")+` WHERE status = 'COMPLETE'`).Scan(&n) == nil && n == w.slots
		})
		close(stop)
		got := result()
		require.Equal(t, 0, s.stop(t, 30*time.Second), "sidecar output:\n%s", s.out)
		t.Logf("sidecar, %2d workers: peak %2d connections", workers, got)
		require.LessOrEqual(t, got, workers+5, "sidecar with %d workers", workers)
	}

	for _, concurrency := range []int{1, 4, 16} {
		w := newWorkload(t, url, fmt.Sprintf("almanac_conns_client_%d", concurrency), "report", 8*concurrency)
		w.admin.Close()
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		cfg.MaxConns = int32(concurrency + 3)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		client, err := almanac.New(pool, almanac.Options{Schema: w.schema, Concurrency: concurrency})
		require.NoError(t, err)
		require.NoError(t, client.Register(almanac.Job{Series: w.grid, From: rangeFrom, To: w.to(),
			Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
				_, err := tx.Exec(ctx, `SELECT pg_sleep(0.2)`)
				return err
			}}))
		stop := make(chan struct{})
		result := peak(stop)
		require.NoError(t, client.Start(ctx))
		waitFor(t, nil, 2*time.Minute, "all slots complete", func() bool {
			var n int
			return pool.QueryRow(ctx, `SELECT count(*) FROM `+w.table("slot")+` WHERE status = 'COMPLETE'`).Scan(&n) == nil && n == w.slots
		})
		close(stop)
		got := result()
		require.NoError(t, client.Stop(ctx))
		pool.Close()
		t.Logf("Client, concurrency %2d, pool of %2d: peak %2d connections", concurrency, cfg.MaxConns, got)
		require.LessOrEqual(t, got, int(cfg.MaxConns)+1, "Client with concurrency %d", concurrency)
	}
}
