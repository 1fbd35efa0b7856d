package suite

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerDrainsAReopenDuringItsBatch: a worker whose batch began while
// the feeder fed, and came back empty after the last re-open committed and
// feeding stopped, looks again instead of stopping, and is woken by that
// re-open rather than by its idle timeout (an hour here, so a missed
// wake-up shows as the test's deadline, not as a slow pass). It then runs
// the re-opened slots and stops at the first empty batch that began after
// feeding stopped.
func TestWorkerDrainsAReopenDuringItsBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := &load{idle: time.Hour}
	var feeding atomic.Bool
	feeding.Store(true)
	searched, release := make(chan struct{}), make(chan struct{})
	var calls int
	batch := func(ctx context.Context) (int, error) {
		calls++
		switch calls {
		case 1: // searched before the last re-open committed: finds nothing
			close(searched)
			<-release
			return 0, nil
		case 2: // the re-opened slots
			return 5, nil
		default:
			return 0, nil
		}
	}
	done := make(chan error, 1)
	go func() { done <- l.work(ctx, &feeding, batch) }()
	<-searched
	l.reopens.fire() // the feeder's last re-open commits
	feeding.Store(false)
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the worker did not stop: it waited for its idle timeout instead of the re-open")
	}
	require.Equal(t, int64(5), l.done.Load(), "the slots re-opened during the first batch ran")
	require.Equal(t, 3, calls, "one batch past the re-opened slots, begun after feeding stopped")
	require.Equal(t, int64(2), l.empty.Load())
}
