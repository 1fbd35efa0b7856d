package pgcluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestFindOnThisMachine(t *testing.T) {
	dir, err := Find()
	require.NoError(t, err, "these tests need PostgreSQL: install it (e.g. apt-get install postgresql) so initdb and pg_ctl exist")
	require.FileExists(t, filepath.Join(dir, "initdb"))
	require.FileExists(t, filepath.Join(dir, "pg_ctl"))
}

func TestFindOrder(t *testing.T) {
	root := t.TempDir()
	install := func(dir string) string {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, name := range []string{"initdb", "pg_ctl"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755))
		}
		return dir
	}
	debian := filepath.Join(root, "debian")
	source := filepath.Join(root, "source")
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))

	_, err := find(empty, debian, source)
	require.ErrorIs(t, err, ErrNoBinaries)

	install(source)
	got, err := find(empty, debian, source)
	require.NoError(t, err)
	require.Equal(t, source, got)

	install(filepath.Join(debian, "9.6", "bin"))
	newest := install(filepath.Join(debian, "16", "bin"))
	install(filepath.Join(debian, "10", "bin"))
	require.NoError(t, os.MkdirAll(filepath.Join(debian, "17", "bin"), 0o755)) // no binaries: skipped
	got, err = find(empty, debian, source)
	require.NoError(t, err)
	require.Equal(t, newest, got, "newest version, compared numerically")

	// Only initdb on PATH is not enough: both tools must sit together.
	half := filepath.Join(root, "half")
	require.NoError(t, os.MkdirAll(half, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(half, "initdb"), nil, 0o755))
	onPath := install(filepath.Join(root, "path"))
	got, err = find(strings.Join([]string{empty, half, onPath}, string(os.PathListSeparator)), debian, source)
	require.NoError(t, err)
	require.Equal(t, onPath, got, "PATH comes first")
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log syncBuffer
	began := time.Now()
	c, err := Start(ctx, Options{Settings: FastSettings, Log: &log})
	require.NoError(t, err)
	t.Logf("cluster started in %v on port %d in %s", time.Since(began).Round(time.Millisecond), c.Port(), c.Dir())
	t.Cleanup(func() { _ = c.Destroy() })

	require.NotZero(t, c.Port())
	require.Contains(t, c.URL("postgres"), "127.0.0.1:")
	require.DirExists(t, filepath.Join(c.Dir(), "data"))

	conn := connect(t, c)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "select 1").Scan(&one))
	require.Equal(t, 1, one)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, "show fsync").Scan(&fsync))
	require.Equal(t, "off", fsync, "Settings are applied")
	var socketDir string
	require.NoError(t, conn.QueryRow(ctx, "show unix_socket_directories").Scan(&socketDir))
	require.Equal(t, c.Dir(), socketDir)
	_, err = conn.Exec(ctx, "create table t (n int); insert into t values (1), (2), (3)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	count := func() int {
		conn := connect(t, c)
		defer conn.Close(ctx)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "select count(*) from t").Scan(&n))
		return n
	}
	port := c.Port()
	for _, mode := range []string{"fast", "immediate", "smart"} {
		require.NoError(t, c.Restart(ctx, mode), mode)
		require.Equal(t, port, c.Port())
		require.Equal(t, 3, count(), "data survives Restart(%s)", mode)
	}

	require.NoError(t, c.Stop(ctx, "fast"))
	require.NoError(t, c.Stop(ctx, "fast"), "stopping a stopped cluster does nothing")
	_, err = pgx.Connect(ctx, c.URL("postgres"))
	require.Error(t, err, "stopped server refuses connections")
	require.NoError(t, c.Start(ctx))
	require.Equal(t, 3, count())
	require.NoError(t, c.Start(ctx), "starting a running cluster does nothing")

	require.Error(t, c.Stop(ctx, "violent"))

	dir := c.Dir()
	require.NoError(t, c.Destroy())
	require.NoDirExists(t, dir)
	require.NoError(t, c.Destroy(), "second Destroy is harmless")
	require.Error(t, c.Start(ctx), "a destroyed cluster cannot start")
	require.Contains(t, log.String(), "database system is ready to accept connections", "Log receives the server log")
}

func TestStartFailureReportsLog(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{Settings: map[string]string{"no_such_setting": "1"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "no_such_setting", "the error carries the server log")
	require.Contains(t, err.Error(), "postgres.log")
	t.Log(err)
}

func TestStartRejectsBadSetting(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{Settings: map[string]string{"work_mem": "1MB\nfsync = on"}})
	require.ErrorContains(t, err, "invalid setting")
	_, err = Start(context.Background(), Options{Settings: map[string]string{"port": "5432"}})
	require.ErrorContains(t, err, "Options.Port")
}

func TestStartWithoutBinaries(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{BinDir: t.TempDir()})
	require.ErrorContains(t, err, "initdb")
}

func TestKilledServerCanStartAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := Start(ctx, Options{Settings: FastSettings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Destroy() })

	// Simulate a crash that bypasses pg_ctl: Cluster still believes the
	// server runs, and Start must notice that it does not.
	pidFile, err := os.ReadFile(filepath.Join(c.Dir(), "data", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err)
	proc, err := os.FindProcess(pid)
	require.NoError(t, err)
	require.NoError(t, proc.Kill())
	require.Eventually(t, func() bool { return !c.alive() }, 10*time.Second, 50*time.Millisecond)

	require.NoError(t, c.Start(ctx))
	connect(t, c).Close(ctx)
}

func TestPortTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := Start(ctx, Options{Settings: FastSettings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })

	// An explicit port that is taken fails with the server's reason.
	_, err = Start(ctx, Options{Port: a.Port()})
	require.ErrorContains(t, err, "already in use")
	t.Log(err)
}

// TestPortTakenRetries replaces freePort, so it is not parallel: the
// parallel tests, which start clusters, run after it.
func TestPortTakenRetries(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	// The first port handed out is taken by the time the server binds it.
	orig := freePort
	defer func() { freePort = orig }()
	calls := 0
	freePort = func() (int, error) {
		calls++
		if calls == 1 {
			return takenPort, nil
		}
		return orig()
	}
	c, err := Start(context.Background(), Options{Settings: FastSettings})
	require.NoError(t, err)
	defer c.Destroy()
	require.Equal(t, 2, calls)
	require.NotEqual(t, takenPort, c.Port())
	connect(t, c).Close(context.Background())
}

func connect(t *testing.T, c *Cluster) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	return conn
}

// syncBuffer is written by the cluster's log goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
