// Package pgtest is the harness for every test that needs PostgreSQL.
//
// A package whose tests use the database calls Main from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test takes an isolated, freshly migrated schema with New (or an
// empty one with Schema). The server is found once per test binary (see
// URL); when none is configured or running locally, the harness starts a
// throwaway cluster with pgcluster, so the tests run anywhere PostgreSQL is
// installed and never skip for want of a database.
//
// Users get the same harness as the public package almanactest, a thin
// layer over this one. It lives here, below the root package, because the
// tests inside acquire, coverage, scheduler and migrations need it and a
// package's own tests cannot import a package that imports it (almanactest
// imports the root, which imports them all).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/internal/dbtarget"
	"github.com/almanacdev/almanac/internal/demo/pgcluster"
	"github.com/almanacdev/almanac/migrations"
)

const (
	// probeTimeout keeps a missing server cheap: discovery tries several.
	probeTimeout = 2 * time.Second
	// discoverTimeout covers initdb and startup of a throwaway cluster.
	discoverTimeout = 2 * time.Minute
	// cleanupTimeout bounds dropping a schema, which waits for any lock a
	// leaked connection of the test still holds.
	cleanupTimeout = 30 * time.Second
	// MaxConns is the size of the process-wide pool returned by Pool.
	MaxConns = 32
)

var (
	mainRan atomic.Bool

	discoverOnce sync.Once
	found        discovery

	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// discovery is the outcome of finding a server, shared by the whole process.
type discovery struct {
	url     string
	cluster *pgcluster.Cluster // set when we started one; stopped by Main
	dir     string             // the cluster's directory, removed by Main
	err     error
}

// Main runs the tests of m, then closes the pool and stops and removes the
// throwaway cluster if one was started, and exits with m.Run's code. It must
// be called from TestMain of every package whose tests use the database:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// m may also wrap the *testing.M, for a package whose tests share servers
// of their own: its Run runs the tests and then stops them, before the
// database is cleaned up.
//
// Failing to clean up is reported on stderr but does not change the exit
// code, except for connections of the pool (Pool) that a test acquired and
// never released: Main waits 10 s for them, then reports them and fails.
// A test binary that dies without returning from m.Run (a panic, a
// -timeout) leaves its cluster behind; the next throwaway cluster started by
// any test binary on the machine stops and removes it.
func Main(m interface{ Run() int }) {
	mainRan.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "almanactest:", err)
		if errors.Is(err, errInUse) && code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func shutdown() error {
	runExampleCleanups()
	var errs []error
	if pool != nil {
		errs = append(errs, closePool(pool, closeWait))
	}
	if found.cluster != nil {
		errs = append(errs, found.cluster.Destroy())
	}
	if found.dir != "" {
		errs = append(errs, os.RemoveAll(found.dir))
	}
	return errors.Join(errs...)
}

// URL returns a connection string for a PostgreSQL server, found once per
// test process in this order:
//
//  1. TEST_DATABASE_URL, then DATABASE_URL, if set; it must accept a
//     connection (there is no fallback from an explicit choice);
//  2. the database almanac's commands use when none is named (dbtarget):
//     postgres://postgres@127.0.0.1:5432/postgres, of which PGHOST, PGPORT,
//     PGUSER and PGDATABASE replace their part when set;
//  3. a throwaway cluster started with pgcluster and pgcluster.FastSettings,
//     stopped by Main.
//
// ALMANAC_PG_VERSION (a major version, e.g. 16) overrides all three: the
// tests then run on a throwaway cluster of that version, from the binaries
// pgcluster.FindVersion finds, and fail if there are none (.ci/pg-install
// installs them; .ci/pg-matrix runs the engine's tests on each version).
//
// Each probe gives up after 2 s. If no server can be had URL fails the test
// with one message saying how to provide one; it never skips. It also fails
// if Main is not running the tests.
func URL(tb testing.TB) string {
	tb.Helper()
	requireMain(tb)
	discoverOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), discoverTimeout)
		defer cancel()
		found = discover(ctx, defaultEnvironment())
	})
	if found.err != nil {
		tb.Fatal(found.err)
	}
	return found.url
}

func requireMain(tb testing.TB) {
	tb.Helper()
	if !mainRan.Load() {
		tb.Fatal("almanactest: call almanactest.Main (pgtest.Main in almanac's own packages) from TestMain, so that the database it finds or starts is cleaned up:\n\tfunc TestMain(m *testing.M) { almanactest.Main(m) }")
	}
}

// Pool returns the process-wide pool on URL (at most MaxConns connections),
// created on first use and closed by Main. Tests share it, so they must not
// close it or change session state they do not restore. It fails the test if
// the pool cannot be created or cannot reach the server.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := URL(tb)
	poolOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout*5)
		defer cancel()
		pool, poolErr = newPool(ctx, url)
	})
	if poolErr != nil {
		tb.Fatal(poolErr)
	}
	return pool
}

func newPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("almanactest: parse database URL: %w", err)
	}
	cfg.MaxConns = MaxConns
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("almanactest: create pool: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("almanactest: connect pool: %w", err)
	}
	return p, nil
}

// Schema creates a fresh, empty schema with a unique name
// ("almanac_test_" and 12 hex digits) and drops it, with everything in it,
// when the test and its subtests are done. The drop uses its own context,
// because the test's may be cancelled by then, and waits at most 30 s for
// locks that connections the test leaked may still hold; a failed drop fails
// the test. Schema fails the test if the schema cannot be created.
func Schema(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	name := "almanac_test_" + randomHex(6)
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		tb.Fatalf("almanactest: create schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
			tb.Errorf("almanactest: drop schema %s (is a connection of the test still holding a lock in it?): %v", name, err)
		}
	})
	return name
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b)
}

// DB is a freshly migrated schema for one test.
type DB struct {
	// Pool is the process-wide pool (see Pool). Its connections have no
	// search_path for Schema: qualify names, or pass Schema to the code
	// under test.
	Pool *pgxpool.Pool
	// Schema is the migrated schema, dropped when the test is done.
	Schema string
	// URL is the server's connection string (see URL); it does not select
	// Schema.
	URL string
}

// New returns a DB whose schema has had every migration applied
// (migrations.Up) and is dropped when the test is done. It fails the test if
// the database cannot be had or a migration fails.
func New(tb testing.TB) *DB {
	tb.Helper()
	schema := Schema(tb)
	p := Pool(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := migrations.Up(ctx, p, schema); err != nil {
		tb.Fatalf("almanactest: migrate schema %s: %v", schema, err)
	}
	return &DB{Pool: p, Schema: schema, URL: URL(tb)}
}

// environment is what discovery depends on, so tests can take away the
// configured and local servers and the binaries.
type environment struct {
	getenv       func(string) string
	local        []string // URLs of the local server, in order of preference
	findBinaries func() (string, error)
	findVersion  func(major int) (string, error)
}

func defaultEnvironment() environment {
	return environment{
		getenv: os.Getenv,
		// The database every almanac command uses when none is named
		// (dbtarget), so that `go test` and `almanac demo` agree.
		local:        []string{dbtarget.DefaultURL(os.Getenv)},
		findBinaries: pgcluster.Find,
		findVersion:  pgcluster.FindVersion,
	}
}

func discover(ctx context.Context, env environment) discovery {
	if v := env.getenv(versionVariable); v != "" {
		return discoverVersion(ctx, env, v)
	}
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		url := env.getenv(name)
		if url == "" {
			continue
		}
		// The value is not repeated: it may hold a password.
		if err := probe(ctx, url); err != nil {
			return discovery{err: fmt.Errorf("almanactest: %s is set but its server does not accept a connection (fix or unset it): %w", name, err)}
		}
		return discovery{url: url}
	}

	var localErr error
	for _, url := range env.local {
		localErr = probe(ctx, url)
		if localErr == nil {
			return discovery{url: url}
		}
		// Only a missing database is worth trying the next database for;
		// anything else (refused, timed out, auth) will fail again.
		var pgErr *pgconn.PgError
		if !errors.As(localErr, &pgErr) || pgErr.Code != "3D000" {
			break
		}
	}

	binDir, clusterErr := env.findBinaries()
	if clusterErr == nil {
		var d discovery
		if d, clusterErr = startThrowaway(ctx, binDir); clusterErr == nil {
			return d
		}
	}
	return discovery{err: noDatabaseError(localErr, clusterErr)}
}

func noDatabaseError(localErr, clusterErr error) error {
	return fmt.Errorf(`almanactest: no PostgreSQL server for the tests. Provide one in any of these ways:
  1. set TEST_DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=disable
  2. start a local server on 127.0.0.1:5432 that lets user postgres in without a password (database postgres; PGHOST, PGPORT, PGUSER, PGDATABASE change that)
  3. install PostgreSQL (e.g. apt-get install postgresql, or brew install postgresql) so that initdb and pg_ctl are on PATH,
     in /usr/lib/postgresql/<version>/bin or in /usr/local/pgsql/bin, and the harness starts a throwaway server
local server: %v
throwaway server: %w`, localErr, clusterErr)
}

func probe(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = probeTimeout
	ctx, cancel := context.WithTimeout(ctx, probeTimeout*2)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// startThrowaway starts a cluster in a directory marked with our pid, so
// that if this process dies without running Main's cleanup a later run can
// tell the cluster is orphaned.
func startThrowaway(ctx context.Context, binDir string) (discovery, error) {
	reapOrphans()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return discovery{}, err
	}
	if err := os.WriteFile(ownerFile(dir), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return discovery{}, err
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{BinDir: binDir, Dir: dir, Settings: pgcluster.FastSettings})
	if err == nil {
		err = waitUp(ctx, c.URL("postgres"), settled)
	}
	if err != nil {
		if c != nil {
			_ = c.Destroy()
		}
		_ = os.RemoveAll(dir)
		return discovery{}, err
	}
	return discovery{url: c.URL("postgres"), cluster: c, dir: dir}, nil
}

// settled is how long a throwaway server has been up before its tests
// start: the default takeover grace (acquire's Policy.TakeoverGrace), which
// counts from the server's start too. Tests that expire a lease and take it
// over then behave as on a server that has been up for long, whichever
// runs first.
const settled = 5 * time.Second

// waitUp waits, on the server's clock, until the server at url has been up
// for d.
func waitUp(ctx context.Context, url string, d time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT pg_sleep_until(pg_postmaster_start_time() + $1 * interval '1 microsecond')`, d.Microseconds())
	return err
}

// FlushStats makes what the pools' connections have done so far visible
// in the server's cumulative statistics (pg_stat_*), which a backend
// otherwise reports up to a second later. The connections must be idle:
// it flushes those it can acquire at once. On PostgreSQL 14, which has no
// way to ask for it, it takes about a second (see flushCollector).
func FlushStats(tb testing.TB, pools ...*pgxpool.Pool) {
	tb.Helper()
	ctx := context.Background()
	var conns []*pgxpool.Conn
	for _, p := range pools {
		conns = append(conns, p.AcquireAllIdle(ctx)...)
	}
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	if len(conns) == 0 {
		return
	}
	if serverMajor(conns[0].Conn().PgConn()) < 15 {
		flushCollector(tb, conns)
		return
	}
	for _, c := range conns {
		// A backend sends its statistics when it is next idle.
		for _, sql := range []string{`SELECT pg_stat_force_next_flush()`, `SELECT 1`} {
			if _, err := c.Exec(ctx, sql); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// flushForReading has pool's connections report their statistics, and
// those of the shared pool (Pool): it ran the test's setup, and a counter
// read through one of its connections would otherwise send that
// connection's pending statistics right after reading them, into the next
// reading (a backend reports at most once a second).
func flushForReading(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	FlushStats(tb, pool, Pool(tb))
}

// RowsRead returns how many live rows of table (schema-qualified) have been
// read so far, by sequential scans or fetched through its indexes
// (pg_stat_user_tables' seq_tup_read plus idx_tup_fetch), once pool's
// connections and the shared pool's have reported their statistics. Tests
// compare two readings around the statements they measure: a cost the
// server counts, whatever the machine's speed. Dead index entries a scan
// steps over are not counted: whether a scan can mark them dead for the
// next one depends on the oldest transaction in the cluster, which other
// tests running at the same time decide.
func RowsRead(tb testing.TB, pool *pgxpool.Pool, table string) int64 {
	tb.Helper()
	flushForReading(tb, pool)
	var n int64
	// seq_tup_read, then idx_tup_fetch: bitmap scans count on the table,
	// plain index scans on each index.
	err := Pool(tb).QueryRow(context.Background(), `
		SELECT pg_stat_get_tuples_returned($1::regclass) + pg_stat_get_tuples_fetched($1::regclass)
			+ (SELECT coalesce(sum(pg_stat_get_tuples_fetched(indexrelid)), 0) FROM pg_index WHERE indrelid = $1::regclass)`,
		table).Scan(&n)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// EntriesRead returns how many entries of index (schema-qualified) scans
// have returned so far, dead ones included (pg_stat_user_indexes'
// idx_tup_read), once pool's connections and the shared pool's have
// reported their statistics.
// Which dead entries a scan steps over depends on the oldest transaction
// in the cluster (see RowsRead), so a test counting them holds the oldest
// snapshot itself.
func EntriesRead(tb testing.TB, pool *pgxpool.Pool, index string) int64 {
	tb.Helper()
	flushForReading(tb, pool)
	var n int64
	if err := Pool(tb).QueryRow(context.Background(), `SELECT pg_stat_get_tuples_returned($1::regclass)`, index).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// OwnPool returns a pool on url of at most maxConns connections, closed
// when the test ends, for a test that measures what its statements cost:
// no other test uses its connections, so their statistics (RowsRead) are
// the test's own. planCacheMode, when not empty, sets the connections'
// plan_cache_mode (force_generic_plan: the plans a long-lived connection
// ends up with; force_custom_plan: a connection's first ones, and every
// one behind a transaction pooler). It fails the test if the pool cannot
// be made.
func OwnPool(tb testing.TB, url string, maxConns int32, planCacheMode string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if planCacheMode != "" {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = planCacheMode
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := closePool(pool, closeWait); err != nil {
			tb.Error(err)
		}
	})
	return pool
}

// closeWait bounds how long closing a pool waits for the connections still
// in use.
const closeWait = 10 * time.Second

// errInUse is returned (wrapped) by closePool.
var errInUse = errors.New("connections still in use")

// closePool closes p, waiting at most wait for its acquired connections to
// be released: pgxpool's Close waits for them without end, so one that a
// failed test never released would hang its package until go test kills
// it. After wait it returns an error wrapping errInUse and leaves the
// close to finish in the background.
func closePool(p *pgxpool.Pool, wait time.Duration) error {
	done := make(chan struct{})
	go func() {
		p.Close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("almanactest: %w: %d connection(s) of a pool were acquired and not released %v after their tests ended; not waiting for them",
			errInUse, p.Stat().AcquiredConns(), wait)
	}
}
