//go:build linux

package topology

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestPartitionedSidecarStopsBeforeItsLeaseExpires cuts a sidecar off from
// the database (its TCP proxy frozen: no data, no error) while its command
// runs, for longer than its lease. Another sidecar takes the slot over
// once the lease has expired on the database clock. The partitioned
// sidecar must have stopped its command by then (it cannot renew, so by its
// own reckoning the lease is gone): the two runs of the slot must not
// overlap.
func TestPartitionedSidecarStopsBeforeItsLeaseExpires(t *testing.T) {
	t.Parallel() // most of its time is spent waiting on servers
	direct := pgtest.URL(t)
	cfg, err := pgx.ParseConfig(direct)
	require.NoError(t, err)
	proxy, err := StartProxy(cfg.Host + ":" + strconv.Itoa(int(cfg.Port)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u, err := url.Parse(direct)
	require.NoError(t, err)
	u.Host = proxy.Addr()
	proxied := u.String()

	w := newWorkload(t, direct, pgtest.Schema(t), "partitioned", 1)
	const leaseTTL = 3 * time.Second
	// A's command would run 10 s: far past its lease once it cannot renew.
	a := w.sidecar("a", proxied, 10, "--lease-ttl", leaseTTL.String(), "--grace", "1s")
	waitFor(t, a, 30*time.Second, "sidecar a runs the slot", func() bool { return len(readRuns(t, w.runs)) == 1 })

	proxy.Freeze()
	frozeAt := uptime(t)
	b := w.sidecar("b", direct, 0.5, "--lease-ttl", leaseTTL.String())
	w.waitCompleted(1, time.Minute, b)
	proxy.Thaw()
	waitFor(t, nil, 30*time.Second, "sidecar a's run ends", func() bool {
		for _, r := range readRuns(t, w.runs) {
			if r.how == "" {
				return false
			}
		}
		return true
	})
	require.Equal(t, 0, b.stop(t, 30*time.Second))
	require.Equal(t, 0, a.stop(t, 30*time.Second))

	runs := readRuns(t, w.runs)
	require.Len(t, runs, 2, "runs: %+v", runs)
	first, second := runs[0], runs[1]
	if second.start < first.start {
		first, second = second, first
	}
	t.Logf("partitioned run: fence %d %.2f-%.2f s (%s); successor: fence %d %.2f-%.2f s; proxy frozen at %.2f s, lease %s",
		first.fence, first.start, first.end, first.how, second.fence, second.start, second.end, frozeAt, leaseTTL)
	require.Greater(t, second.fence, first.fence, "the successor's fencing token")
	if first.end > second.start {
		t.Errorf("the runs of the slot overlapped for %.2f s: the partitioned sidecar's command (fence %d) ran %.2f-%.2f s and ended by %q, its successor (fence %d) started at %.2f s",
			first.end-second.start, first.fence, first.start, first.end, first.how, second.fence, second.start)
	}
}
