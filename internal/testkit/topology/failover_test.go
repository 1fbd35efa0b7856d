//go:build linux

package topology

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/testkit/longtest"
)

// resumeBound is how soon after a failover (the new primary promoted) work
// must resume.
const resumeBound = 5 * time.Second

// TestFailover works 360 slots (180 unless ALMANAC_LONG_TESTS) with two
// sidecars (lease mode) and a library worker (the Client, locked mode, its
// effect committed with the slot) on a pg_auto_failover formation with
// synchronous replication, through its multi-host URL
// (target_session_attrs=read-write), while the primary fails over twice
// (once unless ALMANAC_LONG_TESTS; the second failover promotes the old
// primary, rejoined by a base backup): no slot may be missed or run to its
// end twice (a sidecar run stopped because its lease could not be renewed
// must have been finished by a later holder: see workload.check),
// and work must resume within resumeBound of each failover.
func TestFailover(t *testing.T) {
	t.Parallel() // most of its time is spent waiting on servers
	began := time.Now()
	f, err := StartFormation(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := f.Destroy(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("formation (monitor, primary, synchronous standby) ready in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("formation logs:\n%s", f.Logs())
		}
	})

	slots := longtest.Pick(180, 360)
	url := f.URL("postgres")
	w := newWorkload(t, url, "almanac_failover", "report", slots)
	ctx := context.Background()
	_, err = w.admin.Exec(ctx, `CREATE TABLE `+w.table("effect")+` (slot text NOT NULL, fence bigint NOT NULL)`)
	require.NoError(t, err)

	// A lease long enough to outlast a failover's pause in writes (over
	// 10 s on a busy machine), so a healthy holder keeps its slot through
	// it and records the completion of a run that ended meanwhile.
	const pace, slow = 500 * time.Millisecond, 3 * time.Second
	w.setPace(pace)
	sidecars := []*sidecar{
		w.pacedSidecar("a", url, "--workers", "2", "--lease-ttl", "30s"),
		w.pacedSidecar("b", url, "--workers", "2", "--lease-ttl", "30s"),
	}
	lib := startLibraryWorker(t, w, url, pace)

	for i, at := range longtest.Pick([]int{slots / 4}, []int{slots / 4, slots / 2}) {
		w.waitCompleted(at, 2*time.Minute, sidecars...)
		// The old primary rejoins as the standby by a base backup, and a
		// failover takes from 3 to 20 s, depending on how busy the machine
		// is: runs that start meanwhile are slowed down, so that work is
		// left when the new primary is promoted and for the next failover.
		w.setPace(slow)
		lib.pace.Store(int64(slow))
		require.NoError(t, f.WaitSettled(ctx))
		t0 := uptime(t)
		primary, err := f.Failover(ctx)
		require.NoError(t, err, "failover %d", i+1)
		t1 := uptime(t)
		w.setPace(pace)
		lib.pace.Store(int64(pace))
		resumed := w.firstStartAfter(t1, time.Minute, lib.starts)
		t.Logf("failover %d: port %d promoted %.1f s after pg_autoctl perform failover began; first run %s after", i+1, primary, t1-t0, resumed.Round(time.Millisecond))
		if resumed > resumeBound {
			t.Errorf("failover %d: work resumed %s after the new primary was promoted; want within %s", i+1, resumed.Round(time.Millisecond), resumeBound)
		}
	}
	w.waitCompleted(slots, 3*time.Minute, sidecars...)
	lib.stop()
	for _, s := range sidecars {
		require.Equal(t, 0, s.stop(t, 30*time.Second), "sidecar %s exit code after SIGTERM", s.name)
	}
	w.check(libraryRuns(t, w))
}

// library is a locked-mode job of the Client on the series, whose handler
// commits an effect row (slot, fence) with the slot, works for pace, and
// notes when each attempt began on the recorder's clock.
type library struct {
	stop   func()
	pace   atomic.Int64 // how long a handler works, in nanoseconds
	mu     sync.Mutex
	begins []float64
}

// starts returns the times attempts began, on the recorder's clock.
func (l *library) starts() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.begins)
}

func startLibraryWorker(t *testing.T, w *workload, url string, pace time.Duration) *library {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 6
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	acquire.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	client, err := almanac.New(pool, almanac.Options{Schema: w.schema, Concurrency: 2})
	require.NoError(t, err)
	effect := w.table("effect")
	l := &library{}
	l.pace.Store(int64(pace))
	require.NoError(t, client.Register(almanac.Job{Series: w.grid, From: rangeFrom, To: w.to(),
		Handler: func(ctx context.Context, tx pgx.Tx, s almanac.Slot) error {
			began := uptime(t)
			l.mu.Lock()
			l.begins = append(l.begins, began)
			l.mu.Unlock()
			if _, err := tx.Exec(ctx, `INSERT INTO `+effect+` VALUES ($1, $2)`, s.Slot.String(), s.Fence); err != nil {
				return err
			}
			select {
			case <-time.After(time.Duration(l.pace.Load())):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}))
	require.NoError(t, client.Start(ctx))
	stopped := false
	l.stop = func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(sctx))
		pool.Close()
	}
	t.Cleanup(l.stop)
	return l
}

// libraryRuns lists the fencing tokens of the library worker's committed
// effects by slot.
func libraryRuns(t *testing.T, w *workload) map[string][]int64 {
	t.Helper()
	rows, err := w.admin.Query(context.Background(), `SELECT slot, fence FROM `+w.table("effect"))
	require.NoError(t, err)
	fences := map[string][]int64{}
	var slot string
	var fence int64
	_, err = pgx.ForEachRow(rows, []any{&slot, &fence}, func() error {
		fences[slot] = append(fences[slot], fence)
		return nil
	})
	require.NoError(t, err)
	return fences
}
