package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/demo/pgcluster"
)

func TestMain(m *testing.M) { Main(m) }

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	var exists bool
	err := Pool(t).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists)
	require.NoError(t, err)
	return exists
}

func TestSchemaIsCreatedAndDropped(t *testing.T) {
	var name string
	t.Run("uses", func(t *testing.T) {
		name = Schema(t)
		require.Regexp(t, `^almanac_test_[0-9a-f]{12}$`, name)
		require.True(t, schemaExists(t, name))
		_, err := Pool(t).Exec(context.Background(), "CREATE TABLE "+pgx.Identifier{name, "t"}.Sanitize()+" (n int)")
		require.NoError(t, err)
	})
	require.False(t, schemaExists(t, name), "dropped, with its table, after the subtest")
}

func TestSchemasDiffer(t *testing.T) {
	require.NotEqual(t, Schema(t), Schema(t))
}

func TestPoolIsShared(t *testing.T) {
	p := Pool(t)
	require.Same(t, p, Pool(t))
	require.EqualValues(t, MaxConns, p.Config().MaxConns)
	require.Equal(t, URL(t), URL(t))
}

func TestNew(t *testing.T) {
	db := New(t)
	require.Same(t, Pool(t), db.Pool)
	require.Equal(t, URL(t), db.URL)
	var tables []string
	rows, err := db.Pool.Query(context.Background(),
		"SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", db.Schema)
	require.NoError(t, err)
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, tables, "slot")
	require.Contains(t, tables, "series")
}

// fakeTB records a Fatal instead of failing the real test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.fatal = strings.TrimSuffix(fmt.Sprintln(args...), "\n")
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

// fatalOf runs fn with a fakeTB and returns what it was failed with.
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.fatal
}

func TestWithoutMain(t *testing.T) {
	mainRan.Store(false)
	defer mainRan.Store(true)
	for name, fn := range map[string]func(testing.TB){
		"URL":  func(tb testing.TB) { URL(tb) },
		"Pool": func(tb testing.TB) { Pool(tb) },
		"New":  func(tb testing.TB) { New(tb) },
	} {
		require.Contains(t, fatalOf(t, fn), "call almanactest.Main (pgtest.Main in almanac's own packages) from TestMain", name)
	}
}

var unreachable = []string{"postgres://postgres@127.0.0.1:1/test?sslmode=disable"}

func TestNoDatabase(t *testing.T) {
	began := time.Now()
	d := discover(context.Background(), environment{
		getenv:       func(string) string { return "" },
		local:        unreachable,
		findBinaries: func() (string, error) { return "", pgcluster.ErrNoBinaries },
	})
	require.Error(t, d.err)
	require.Less(t, time.Since(began), 5*time.Second, "a missing server is cheap")
	msg := d.err.Error()
	require.Contains(t, msg, "TEST_DATABASE_URL=postgres://")
	require.Contains(t, msg, "127.0.0.1:5432")
	require.Contains(t, msg, "install PostgreSQL")
	require.ErrorIs(t, d.err, pgcluster.ErrNoBinaries)
	t.Log(msg)

	// The harness fails the test with that message; it does not skip.
	URL(t) // discover the real server first, so that swapping found back restores it
	saved := found
	found = d
	defer func() { found = saved }()
	require.Equal(t, msg, fatalOf(t, func(tb testing.TB) { URL(tb) }))
}

func TestExplicitURL(t *testing.T) {
	url := URL(t)
	env := func(vars map[string]string) environment {
		return environment{
			getenv:       func(k string) string { return vars[k] },
			local:        unreachable,
			findBinaries: func() (string, error) { t.Fatal("must not look for binaries"); return "", nil },
		}
	}
	d := discover(context.Background(), env(map[string]string{"TEST_DATABASE_URL": url, "DATABASE_URL": "postgres://nowhere:1/x"}))
	require.NoError(t, d.err)
	require.Equal(t, url, d.url)
	require.Nil(t, d.cluster)

	d = discover(context.Background(), env(map[string]string{"DATABASE_URL": url}))
	require.NoError(t, d.err)
	require.Equal(t, url, d.url)

	// An explicit choice that does not work is an error, not a reason to
	// quietly test against something else.
	d = discover(context.Background(), env(map[string]string{"TEST_DATABASE_URL": "postgres://postgres:secret@127.0.0.1:1/test"}))
	require.ErrorContains(t, d.err, "TEST_DATABASE_URL is set")
	require.NotContains(t, d.err.Error(), "secret")
}

// TestThrowaway takes the path a machine without a configured or running
// server takes: it really starts a cluster.
func TestThrowaway(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	d := discover(ctx, environment{
		getenv:       func(string) string { return "" },
		local:        unreachable,
		findBinaries: pgcluster.Find,
	})
	require.NoError(t, d.err)
	t.Logf("throwaway cluster started in %v: %s", time.Since(began).Round(time.Millisecond), d.url)
	require.NotNil(t, d.cluster)
	t.Cleanup(func() {
		require.NoError(t, d.cluster.Destroy())
		require.NoError(t, os.RemoveAll(d.dir))
	})
	require.Equal(t, d.cluster.URL("postgres"), d.url)
	require.FileExists(t, ownerFile(d.dir))

	conn, err := pgx.Connect(ctx, d.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
	require.Equal(t, "off", fsync, "started with FastSettings")

	// The same cluster serves as a "local server" without database test:
	// discovery falls back to database postgres.
	d2 := discover(ctx, environment{
		getenv:       func(string) string { return "" },
		local:        []string{d.cluster.URL("almanac_no_such_db"), d.cluster.URL("postgres")},
		findBinaries: func() (string, error) { return "", pgcluster.ErrNoBinaries },
	})
	require.NoError(t, d2.err)
	require.Equal(t, d.cluster.URL("postgres"), d2.url)
	require.Nil(t, d2.cluster)
}

func TestReapOrphans(t *testing.T) {
	ctx := context.Background()
	binDir, err := pgcluster.Find()
	require.NoError(t, err)

	// A cluster whose owner has died, as after a test binary panicked.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	orphanDir, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	orphan, err := pgcluster.Start(ctx, pgcluster.Options{BinDir: binDir, Dir: orphanDir, Settings: pgcluster.FastSettings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = orphan.Destroy(); _ = os.RemoveAll(orphanDir) })
	// Orphaned only once it runs: a directory without an owner is left
	// alone, so no throwaway start anywhere on the machine reaps it while
	// initdb is still creating it.
	require.NoError(t, os.WriteFile(ownerFile(orphanDir), []byte(strconv.Itoa(dead.Process.Pid)), 0o644))

	// A cluster whose owner (this process) lives.
	live, err := startThrowaway(ctx, binDir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = live.cluster.Destroy(); _ = os.RemoveAll(live.dir) })
	// startThrowaway reaped the orphan.
	require.NoDirExists(t, orphanDir)
	_, err = pgx.Connect(ctx, orphan.URL("postgres"))
	require.Error(t, err, "the orphaned server is stopped")

	reapOrphans()
	require.DirExists(t, live.dir)
	conn, err := pgx.Connect(ctx, live.url)
	require.NoError(t, err, "a live owner's cluster is left alone")
	require.NoError(t, conn.Close(ctx))

	// A stale pid file naming some other process (pid reuse) must not get
	// that process killed.
	other := exec.Command("sleep", "30")
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	staleDir, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(staleDir) })
	require.NoError(t, os.MkdirAll(filepath.Join(staleDir, "data"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(staleDir, "data", "postmaster.pid"), []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o600))
	require.NoError(t, os.WriteFile(ownerFile(staleDir), []byte(strconv.Itoa(dead.Process.Pid)), 0o644))
	reapOrphans()
	require.NoDirExists(t, staleDir)
	require.True(t, processExists(other.Process.Pid), "an unrelated process is not signalled")
}

// TestVersionRequested: ALMANAC_PG_VERSION asks for a throwaway cluster of
// one version, over every other way of finding a server, and fails, saying
// what to install, when there are no binaries of that version.
func TestVersionRequested(t *testing.T) {
	env := func(vars map[string]string, findVersion func(int) (string, error)) environment {
		return environment{
			getenv:       func(k string) string { return vars[k] },
			local:        []string{URL(t)},
			findBinaries: func() (string, error) { t.Fatal("must not look for the default binaries"); return "", nil },
			findVersion:  findVersion,
		}
	}
	var asked []int
	d := discover(context.Background(), env(map[string]string{versionVariable: "99", "TEST_DATABASE_URL": URL(t)},
		func(major int) (string, error) { asked = append(asked, major); return pgcluster.FindVersion(major) }))
	require.Equal(t, []int{99}, asked, "the version wins over TEST_DATABASE_URL and the local server")
	require.ErrorIs(t, d.err, pgcluster.ErrNoBinaries)
	require.ErrorContains(t, d.err, "ALMANAC_PG_VERSION=99")
	require.ErrorContains(t, d.err, ".ci/pg-install 99")
	t.Log(d.err)

	for _, bad := range []string{"sixteen", "16.4", "9"} {
		d := discover(context.Background(), env(map[string]string{versionVariable: bad},
			func(int) (string, error) { t.Fatal("must not look for binaries"); return "", nil }))
		require.ErrorContains(t, d.err, fmt.Sprintf("ALMANAC_PG_VERSION=%q: expected a PostgreSQL major version such as 16", bad))
	}
}

// TestServerVersion: the tests run on the version ALMANAC_PG_VERSION asks
// for, and serverMajor reads it.
func TestServerVersion(t *testing.T) {
	conn, err := Pool(t).Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	var num int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&num))
	require.Equal(t, num/10000, serverMajor(conn.Conn().PgConn()))
	if v := os.Getenv(versionVariable); v != "" {
		require.Equal(t, v, strconv.Itoa(num/10000), "the server runs the version %s asks for", versionVariable)
	}
}

// TestFlushStats: what a pool's connections read is in the statistics at
// once after FlushStats, on every server version: a reading taken too
// early would miss scans.
func TestFlushStats(t *testing.T) {
	ctx := context.Background()
	table := Schema(t) + ".t"
	_, err := Pool(t).Exec(ctx, "CREATE TABLE "+table+" (n int)")
	require.NoError(t, err)
	own := OwnPool(t, URL(t), 3, "")
	scans := func() int64 {
		var n int64
		require.NoError(t, Pool(t).QueryRow(ctx, `SELECT pg_stat_get_numscans($1::regclass)`, table).Scan(&n))
		return n
	}
	FlushStats(t, Pool(t))
	before := scans()
	for range 2 {
		conns := make([]*pgxpool.Conn, 3)
		for i := range conns {
			conns[i], err = own.Acquire(ctx)
			require.NoError(t, err)
			_, err = conns[i].Exec(ctx, "SELECT FROM "+table)
			require.NoError(t, err)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	FlushStats(t, own)
	require.Equal(t, before+6, scans(), "six scans on three connections")
}

// TestFlushStatsReleasesConnections: a flush that fails gives back every
// connection it took, so that closing the pool does not wait for them.
func TestFlushStatsReleasesConnections(t *testing.T) {
	ctx := context.Background()
	own := OwnPool(t, URL(t), 3, "")
	conns := make([]*pgxpool.Conn, 3)
	pids := make([]uint32, 3)
	var err error
	for i := range conns {
		conns[i], err = own.Acquire(ctx)
		require.NoError(t, err)
		pids[i] = conns[i].Conn().PgConn().PID()
	}
	for _, c := range conns {
		c.Release()
	}
	_, err = Pool(t).Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM unnest($1::int[]) AS pid`, pids)
	require.NoError(t, err)
	require.NotEmpty(t, fatalOf(t, func(tb testing.TB) { FlushStats(tb, own) }), "flushing on ended sessions fails")
	// A broken connection is destroyed in the background once released.
	require.Eventually(t, func() bool { return own.Stat().AcquiredConns() == 0 }, time.Minute, 10*time.Millisecond,
		"every connection is given back")
}

// TestClosePoolDoesNotWait: a connection a test never released does not
// hang closing its pool.
func TestClosePoolDoesNotWait(t *testing.T) {
	ctx := context.Background()
	p, err := newPool(ctx, URL(t))
	require.NoError(t, err)
	leaked, err := p.Acquire(ctx)
	require.NoError(t, err)
	err = closePool(p, 50*time.Millisecond)
	require.ErrorIs(t, err, errInUse)
	require.ErrorContains(t, err, "1 connection(s) of a pool were acquired and not released")
	leaked.Release()
	require.NoError(t, closePool(p, time.Minute), "closed once the connection is back")
}
