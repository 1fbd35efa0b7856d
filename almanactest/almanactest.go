// Package almanactest helps test programs that use almanac: it finds or
// starts a PostgreSQL server, gives each test a schema of its own that is
// dropped when the test ends, and asserts the state of slots.
//
// A package whose tests use it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { almanactest.Main(m) }
//
// and each test takes a Client on a fresh, migrated schema:
//
//	client := almanactest.Client(t, almanac.Options{})
//	// register series and jobs, Drain ...
//	almanactest.RequireStatus(t, client, series, start, almanac.StatusComplete)
//
// The server is found once per test binary (see URL): TEST_DATABASE_URL,
// DATABASE_URL, postgres://postgres@127.0.0.1:5432/postgres, else a throwaway cluster
// started from the installed PostgreSQL binaries (initdb, pg_ctl) and
// removed by Main. Tests never skip for want of a database: they fail with
// a message saying how to provide one.
//
// Tests are isolated by schema, not by database: one database serves every
// test, so the harness needs no right to create databases and works on a
// managed server that grants a single one, and tests in parallel (t.Parallel,
// and several packages at once) do not see each other's slots. This is also
// why almanactest does not build on github.com/peterldowns/pgtestdb, which
// gives each test a database cloned from a template: it would need CREATEDB,
// would not exercise almanac's schema option, and would still need the
// discovery and throwaway cluster here.
package almanactest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// callTimeout bounds each database call the kit makes for a test.
const callTimeout = time.Minute

// Main runs the tests of m, then closes the pool, drops the schemas of
// Example functions (see ExampleTB), stops and removes the throwaway
// cluster if one was started, and exits with m.Run's code (or 1 when a
// test left connections of the pool acquired: Main waits 10 s for them,
// then reports them rather than hang). Every package whose tests use
// almanactest must call it from TestMain; the other functions fail the
// test if it does not.
//
// A test binary that dies without returning from m.Run (a panic, a
// -timeout) leaves its throwaway cluster behind; the next one started on
// the machine stops and removes it.
func Main(m *testing.M) { pgtest.Main(m) }

// URL returns the connection string of the tests' server, found once per
// test binary in this order:
//
//  1. TEST_DATABASE_URL, then DATABASE_URL, if set; it must accept a
//     connection (there is no fallback from an explicit choice);
//  2. postgres://postgres@127.0.0.1:5432/postgres, the database the almanac
//     command uses when none is named, of which PGHOST, PGPORT, PGUSER and
//     PGDATABASE replace their part when set;
//  3. a throwaway cluster (fsync off, on a temporary directory) started
//     with the PostgreSQL binaries on PATH or in the usual directories, and
//     removed by Main.
//
// ALMANAC_PG_VERSION (a major version, e.g. 16) overrides all three with a
// throwaway cluster of that version, and fails if its binaries are not
// installed.
//
// Each probe gives up after 2 s. URL fails the test if no server can be had
// (saying how to provide one) or if Main is not running the tests.
func URL(tb testing.TB) string {
	tb.Helper()
	return pgtest.URL(tb)
}

// Pool returns the test binary's pool on URL, shared by all its tests (at
// most 32 connections) and closed by Main. Tests must not close it, nor
// change session state they do not restore. Its connections have the
// server's default search_path: qualify names with the test's schema.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return pgtest.Pool(tb)
}

// Schema creates a fresh, empty schema with a unique name ("almanac_test_"
// and 12 hex digits) and drops it, with everything in it, when the test and
// its subtests are done (waiting at most 30 s for locks connections the
// test leaked may still hold; a failed drop fails the test). Use it for the
// test's own tables, or pass it as Options.Schema to Client.
func Schema(tb testing.TB) string {
	tb.Helper()
	return pgtest.Schema(tb)
}

// Client returns an almanac Client on Pool with opts, its schema migrated.
// When opts.Schema is empty it is a fresh schema from Schema, dropped when
// the test ends; otherwise the given one (which Client migrates, and which
// the caller cleans up). If the test started the client, it is stopped when
// the test ends, before its schema is dropped. Client fails the test if the
// options are invalid or the migration fails.
//
// The pool is shared by all tests of the binary: tests that start clients
// in parallel should keep Options.Concurrency small, or build their client
// with almanac.New on a pool of their own (on URL).
func Client(tb testing.TB, opts almanac.Options) *almanac.Client {
	tb.Helper()
	if opts.Schema == "" {
		opts.Schema = Schema(tb)
	}
	c, err := almanac.New(Pool(tb), opts)
	if err != nil {
		tb.Fatalf("almanactest: new client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := c.Migrate(ctx); err != nil {
		tb.Fatalf("almanactest: migrate schema %s: %v", opts.Schema, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil && !errors.Is(err, almanac.ErrNotStarted) {
			tb.Errorf("almanactest: stop client: %v", err)
		}
	})
	return c
}

// ExampleTB returns a testing.TB for a runnable Example function, which
// has none, so that it can use this package's helpers: Fatal and Fatalf
// panic (the example fails with the message), Error, Errorf, Log and Logf
// print to stderr, Helper does nothing, and cleanups (a schema's drop, a
// client's stop) run when Main finishes. Its other methods panic.
func ExampleTB() testing.TB { return pgtest.ExampleTB() }
