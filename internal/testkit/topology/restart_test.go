//go:build linux

package topology

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/longtest"
)

// TestImmediateRestart works 300 slots (150 unless ALMANAC_LONG_TESTS)
// with two sidecars while their server is restarted twice with pg_ctl
// restart -m immediate (a crash and crash recovery): no slot may be missed
// or run to its end twice.
func TestImmediateRestart(t *testing.T) {
	t.Parallel() // most of its time is spent waiting on servers
	ctx := context.Background()
	// Commits are flushed to the WAL before they are acknowledged
	// (synchronous_commit stays on), so an acknowledged COMPLETE survives
	// the crash; fsync only matters for a crash of the machine.
	c, err := StartCluster(ctx, map[string]string{
		"fsync": "off", "full_page_writes": "off", "max_connections": "100",
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	})
	slots := longtest.Pick(150, 300)
	url := c.URL("postgres")
	w := newWorkload(t, url, "almanac_restart", "report", slots)
	// A lease that outlasts the restart and the reconnects after it on a
	// busy machine, so a run that ended can still record its completion
	// (with a short lease its sidecar gives the slot up, and the slot runs
	// again: lease mode's at-least-once, which this test does not measure).
	sidecars := []*sidecar{
		w.sidecar("a", url, 0.2, "--workers", "2", "--lease-ttl", "30s"),
		w.sidecar("b", url, 0.2, "--workers", "2", "--lease-ttl", "30s"),
	}
	none := func() []float64 { return nil }
	for i, at := range []int{slots / 3, 2 * slots / 3} {
		w.waitCompleted(at, 2*time.Minute, sidecars...)
		t0 := uptime(t)
		require.NoError(t, c.Restart(ctx, "immediate"), "restart %d", i+1)
		t1 := uptime(t)
		resumed := w.firstStartAfter(t1, time.Minute, none)
		t.Logf("restart %d: server back after %.1f s; first run %s after", i+1, t1-t0, resumed.Round(time.Millisecond))
	}
	w.waitCompleted(slots, 3*time.Minute, sidecars...)
	for _, s := range sidecars {
		require.Equal(t, 0, s.stop(t, 30*time.Second), "sidecar %s exit code after SIGTERM", s.name)
	}
	w.check(nil)
}
