//go:build linux

package topology

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

func TestMissingComponentNamesTheInstallLine(t *testing.T) {
	_, err := program("almanac-no-such-program", "almanac-no-such-package", "almanac-other-package")
	require.ErrorIs(t, err, ErrMissing)
	require.ErrorContains(t, err, "install it with: apt-get install -y almanac-no-such-package almanac-other-package")
}

func TestProxyFreezeHoldsTrafficUntilThawed(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	p, err := StartProxy(cfg.Host + ":" + strconv.Itoa(int(cfg.Port)))
	require.NoError(t, err)
	defer p.Close()
	cfg.Host, cfg.Port = "127.0.0.1", uint16(p.Port())
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))

	p.Freeze()
	// A query sent while frozen gets no answer: it is held, not refused.
	result := make(chan error, 1)
	go func() { result <- conn.QueryRow(ctx, "SELECT 2").Scan(&one) }()
	// A new connection is accepted but goes nowhere either.
	dialed := make(chan error, 1)
	go func() {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_ = c.Close(ctx)
		}
		dialed <- err
	}()
	select {
	case err := <-result:
		t.Fatalf("a query through a frozen proxy returned: %v", err)
	case err := <-dialed:
		t.Fatalf("a connection through a frozen proxy completed: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	p.Thaw()
	require.NoError(t, <-result)
	require.Equal(t, 2, one)
	require.NoError(t, <-dialed)
}

// A test binary that died leaves its servers running; the next component
// started on the machine ends them and removes their directory.
func TestOrphanedServersAreReaped(t *testing.T) {
	w, err := newWorkDir("reap")
	require.NoError(t, err)
	d, err := w.start("sleeper", "/bin/sh", []string{"-c", "sleep 600 & wait"}, []string{"PATH=/usr/bin:/bin"})
	require.NoError(t, err)
	// The owner is now a pid that has exited.
	gone, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	require.NoError(t, err)
	_, err = gone.Wait()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(w.path, "owner"), []byte(strconv.Itoa(gone.Pid)), 0o644))

	reapOrphans()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphaned server is still running")
	}
	require.False(t, groupIn(d.cmd.Process.Pid, w.path), "a process of the orphan's group is still running")
	_, err = os.Stat(w.path)
	require.True(t, errors.Is(err, os.ErrNotExist), "the orphan's directory is still there: %v", err)
}
