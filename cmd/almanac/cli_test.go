package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/dbtarget"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(cliTests{m}) }

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command line in-process against the test database.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	return cliEnv(t, map[string]string{"DATABASE_URL": pgtest.URL(t)}, args...)
}

func cliEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errOut, func(k string) string { return env[k] })
	return result{code, out.String(), errOut.String()}
}

func requireOK(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
}

// freshSchema returns a schema name that does not exist yet, dropped after
// the test whatever the test did to it.
func freshSchema(t *testing.T, prefix string) string {
	t.Helper()
	name := prefix + fmt.Sprint(rand.Uint32()) // unique among parallel tests
	pool := pgtest.Pool(t)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+sqlschema.Quote(name)+" CASCADE")
		require.NoError(t, err)
	})
	return name
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, path := range [][]string{{}, {"migrate"}, {"migrate", "up"}, {"migrate", "down"}, {"migrate", "status"},
		{"migrate", "sql"}, {"migrate", "grants"}, {"series"}, {"series", "add"}, {"series", "list"}} {
		r := cliEnv(t, nil, append(path, "--help")...)
		require.Equal(t, 0, r.code, "%v", path)
		require.Contains(t, r.stdout, "Usage:", "%v", path)
	}
}

func TestMigrateLifecycle(t *testing.T) {
	schema := freshSchema(t, "cli_migrate_")
	r := cli(t, "--schema", schema, "migrate", "status", "--json")
	requireOK(t, r)
	var status struct {
		Schema        string
		ServerVersion string `json:"server_version"`
		Migrations    []struct {
			Version int
			Applied bool
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &status))
	require.Equal(t, schema, status.Schema)
	require.False(t, status.Migrations[0].Applied)
	var server string
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SHOW server_version").Scan(&server))
	require.Equal(t, server, status.ServerVersion)
	r = cli(t, "--schema", schema, "migrate", "status")
	requireOK(t, r)
	target := dbtarget.DescribeURL(pgtest.URL(t))
	require.Contains(t, r.stdout, fmt.Sprintf("schema %q in %s on PostgreSQL %s\n", schema, target, server), "names the database")

	r = cli(t, "--schema", schema, "migrate", "up")
	requireOK(t, r)
	require.Contains(t, r.stdout, "applied 001_initial")
	require.Contains(t, r.stdout, fmt.Sprintf("schema %q in %s is at version", schema, target))
	r = cli(t, "--schema", schema, "migrate", "up")
	requireOK(t, r)
	require.Contains(t, r.stdout, fmt.Sprintf("schema %q in %s is up to date", schema, target))
	r = cli(t, "--schema", schema, "series", "list")
	requireOK(t, r)
	require.Equal(t, fmt.Sprintf("no series in schema %q in %s; register one with almanac series add NAME --interval P\n", schema, target), r.stdout)

	r = cli(t, "--schema", schema, "migrate", "status", "--json")
	requireOK(t, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &status))
	for _, m := range status.Migrations {
		require.True(t, m.Applied, "migration %d", m.Version)
	}

	r = cli(t, "--schema", schema, "migrate", "down", "--yes")
	requireOK(t, r)
	require.Contains(t, r.stdout, fmt.Sprintf("removed almanac from schema %q in %s", schema, target))
	var exists bool
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "migrate down removes everything, the schema included")
}

func TestMigrateConcurrently(t *testing.T) {
	schema := freshSchema(t, "cli_parallel_")
	var wg sync.WaitGroup
	results := make([]result, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = cli(t, "--schema", schema, "migrate", "up", "--json")
		}()
	}
	wg.Wait()
	applied := map[int]int{}
	for _, r := range results {
		requireOK(t, r)
		var res migrateResult
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
		for _, v := range res.Applied {
			applied[v]++
		}
	}
	require.Len(t, applied, len(migrations.All()))
	for v, n := range applied {
		require.Equal(t, 1, n, "exactly one process applies migration %d", v)
	}
	var versions int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT count(*) FROM "+sqlschema.Quote(schema)+".schema_migrations").Scan(&versions))
	require.Equal(t, len(migrations.All()), versions)
}

func TestHostileSchemaNames(t *testing.T) {
	t.Parallel() // its own schema
	for _, prefix := range []string{`we"ird_`, `x; DROP TABLE slot; --`, `Space s'_`, `"; SELECT pg_sleep(10); --`} {
		schema := freshSchema(t, prefix)
		requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
		requireOK(t, cli(t, "--schema", schema, "series", "add", "a'b;c", "--interval", "P1D", "--tz", "Europe/Berlin"))
		r := cli(t, "--schema", schema, "series", "list", "--json")
		requireOK(t, r)
		var list []seriesJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
		require.Len(t, list, 1)
		require.Equal(t, "a'b;c", list[0].Name)
		requireOK(t, cli(t, "--schema", schema, "migrate", "down", "--yes"))
	}
}

func TestSeriesAddAndList(t *testing.T) {
	schema := freshSchema(t, "cli_series_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))

	r := cli(t, "--schema", schema, "--json", "series", "add", "payroll", "--interval", "P1M", "--tz", "America/New_York", "--origin", "2026-01-31")
	requireOK(t, r)
	var added seriesJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &added))
	require.Equal(t, "2026-01-31T00:00:00-05:00", added.Origin)
	require.True(t, *added.Created)

	r = cli(t, "--schema", schema, "--json", "series", "add", "payroll", "--interval", "P1M", "--tz", "America/New_York", "--origin", "2026-01-31T05:00:00Z")
	requireOK(t, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &added))
	require.False(t, *added.Created, "the same grid again is a no-op")

	r = cli(t, "--schema", schema, "series", "add", "payroll", "--interval", "P1M", "--tz", "UTC")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "registered with zone America/New_York")

	requireOK(t, cli(t, "--schema", schema, "series", "add", "sensor", "--interval", "PT300S"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "weekly", "--interval", "P7D"))
	r = cli(t, "--schema", schema, "series", "list", "--json")
	requireOK(t, r)
	var list []seriesJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 3)
	require.Equal(t, []string{"P1M", "PT5M", "P1W"}, []string{list[0].Interval, list[1].Interval, list[2].Interval}, "intervals are stored canonically")
	require.Equal(t, "2000-01-03T00:00:00Z", list[2].Origin, "weekly series start on Monday")

	r = cli(t, "--schema", schema, "series", "list")
	requireOK(t, r)
	require.Contains(t, r.stdout, "America/New_York")
}

// snapshot captures everything a command could have written in schema.
// (Only schema: other tests and other clients of the server create and
// drop schemas meanwhile.)
func snapshot(t *testing.T, schema string) string {
	t.Helper()
	var s string
	err := pgtest.Pool(t).QueryRow(context.Background(), fmt.Sprintf(`SELECT
		(SELECT coalesce(string_agg(name || "interval" || time_zone || origin::text, ',' ORDER BY name, "interval"), '') FROM %[1]s.series) || '|' ||
		(SELECT count(*) FROM %[1]s.slot)::text || '|' ||
		(SELECT count(*) FROM %[1]s.schema_migrations)::text`, sqlschema.Quote(schema))).Scan(&s)
	require.NoError(t, err)
	return s
}

func TestBadInputExitsTwoAndWritesNothing(t *testing.T) {
	schema := freshSchema(t, "cli_bad_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "existing", "--interval", "PT5M"))
	before := snapshot(t, schema)

	add := func(extra ...string) []string {
		return append([]string{"--schema", schema, "series", "add"}, extra...)
	}
	tests := []struct {
		args []string
		want string // a fragment of the one-line error, usually the bad value
	}{
		{add("x", "--interval", "P"), `"P"`},
		{add("x", "--interval", "PT"), `"PT"`},
		{add("x", "--interval", "P1.5M"), `"P1.5M"`},
		{add("x", "--interval", "PT-5M"), `"PT-5M"`},
		{add("x", "--interval", "P0D"), `"P0D"`},
		{add("x", "--interval", "5m"), `"5m"`},
		{add("x", "--interval", "-P1D"), `"-P1D"`},
		{add("x"), "--interval is required"},
		{add("x", "--interval", "P1D", "--tz", "Mars/Base"), `"Mars/Base"`},
		{add("x", "--interval", "P1D", "--tz", "Local"), `"Local"`},
		{add("x", "--interval", "P1D", "--origin", "2023-02-29"), `"2023-02-29"`},
		{add("x", "--interval", "P1D", "--origin", "2026-01-01T24:00"), `"2026-01-01T24:00"`},
		{add("x", "--interval", "P1D", "--origin", "10000-01-01"), `"10000-01-01"`},
		{add("x", "--interval", "P1D", "--origin", "yesterday"), `"yesterday"`},
		{add("", "--interval", "P1D"), "empty"},
		{add("a\x00b", "--interval", "P1D"), `"a\x00b"`},
		{add(strings.Repeat("n", 10240), "--interval", "P1D"), "10240 bytes"},
		{add("existing", "--interval", "PT5M", "--tz", "Europe/Berlin"), "registered with zone UTC"},
		{add(), "expects one series NAME"},
		{add("a", "b", "--interval", "P1D"), "expects one series NAME"},
		{add("x", "--interval"), "flag needs an argument"},
		{add("x", "--intervall", "P1D"), "unknown flag"},
		{[]string{"--schema", schema, "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--schema", schema, "series", "remove", "x"}, `unknown command "remove"`},
		{[]string{"--schema", "", "series", "list"}, "empty"},
		{[]string{"--schema", strings.Repeat("s", 64), "series", "list"}, "64 bytes"},
		{[]string{"--schema", "a\x01b", "series", "list"}, "control character"},
		{[]string{"--schema", schema, "migrate", "down", "--to", "99"}, "--to 99"},
		{[]string{"--schema", schema, "migrate", "up", "extra"}, `unknown command "extra"`},
	}
	for _, tt := range tests {
		r := cli(t, tt.args...)
		require.Equal(t, 2, r.code, "%q: stderr %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.want, "%q", tt.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "almanac: "), r.stderr)
	}
	require.Equal(t, before, snapshot(t, schema), "nothing was written")
}

func TestUnavailableExitsThree(t *testing.T) {
	unreachable := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT": "200ms"}
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "status"}, {"series", "list"},
		{"series", "add", "x", "--interval", "PT5M"}} {
		r := cliEnv(t, unreachable, args...)
		require.Equal(t, 3, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "cannot reach the database")
		require.Contains(t, r.stderr, "DATABASE_URL")
	}
	// Bad input is reported before the database is even tried.
	r := cliEnv(t, unreachable, "series", "add", "x", "--interval", "P0D")
	require.Equal(t, 2, r.code, r.stderr)

	schema := freshSchema(t, "cli_unmigrated_")
	r = cli(t, "--schema", schema, "series", "list")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "migrate up")

	r = cliEnv(t, map[string]string{"DATABASE_URL": "postgres://%zz"}, "migrate", "up")
	require.Equal(t, 2, r.code, r.stderr)
	require.NotContains(t, r.stderr, "%zz", "the URL may hold a password and is not echoed")
}

// TestBinaryExitCodes checks that the exit codes reach the shell from the
// real binary, and that errors are single lines without stack traces.
func TestBinaryExitCodes(t *testing.T) {
	t.Parallel() // its own processes
	bin := buildAlmanac(t)
	for _, tt := range []struct {
		args []string
		env  string
		code int
	}{
		{[]string{"--help"}, "", 0},
		{[]string{"series", "add", "x", "--interval", "P0D"}, "", 2},
		{[]string{"migrate", "up"}, "DATABASE_URL=postgres://postgres@127.0.0.1:1/x?connect_timeout=2 ALMANAC_RETRY_TIMEOUT=200ms", 3},
	} {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = append(os.Environ(), strings.Fields(tt.env)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, tt.code, code, "%v: %s", tt.args, stderr.String())
		require.NotContains(t, stderr.String(), "goroutine", "no stack traces")
	}
}

// TestDemo runs `almanac demo` against the test database: it must end with
// its verification line, and drop its schema.
func TestDemo(t *testing.T) {
	t.Parallel() // the demo makes a schema of its own
	r := cli(t, "demo", "--keep")
	requireOK(t, r)
	require.Contains(t, r.stdout, "verified: 2,016 slots, 2,016 report rows, 0 duplicates, 24 re-opened windows recomputed once")
	require.Contains(t, r.stdout, "gaps        none")
	// Its own schema, named in its output: other runs (other test binaries
	// on the same server) may have demo schemas of their own meanwhile.
	m := regexp.MustCompile(`(?m)^schema +(almanac_demo_\w+)$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, "the demo names its schema:\n%s", r.stdout)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+sqlschema.Quote(m[1])+" CASCADE")
		require.NoError(t, err)
	})
	target := dbtarget.DescribeURL(pgtest.URL(t))
	require.Contains(t, r.stdout, "database  "+target+"\n", "the demo names its database as user@host:port/db")
	// --keep says how to look at what it kept, and the commands it prints run.
	require.Contains(t, r.stdout, "kept schema "+m[1]+" in "+target+"; look at it with:")
	status := regexp.MustCompile(`(?m)^  almanac (--schema \S+ status sensor_report --interval PT5M)$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, status, r.stdout)
	require.Contains(t, r.stdout, "  almanac --schema "+m[1]+" serve")
	st := cli(t, strings.Fields(status[1])...)
	requireOK(t, st)
	require.Contains(t, st.stdout, "complete        2,016")
}

// TestDefaultDatabase: without DATABASE_URL every command uses
// postgres://postgres@127.0.0.1:5432/postgres, whose parts PG* replace, and
// says so; a refused connection fails within seconds, not the retry budget.
func TestDefaultDatabase(t *testing.T) {
	began := time.Now()
	r := cliEnv(t, map[string]string{"PGPORT": "1"}, "series", "list")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "almanac: cannot reach the database postgres@127.0.0.1:1/postgres (the default database): ")
	require.Contains(t, r.stderr, "connection refused; start PostgreSQL there, or point DATABASE_URL (or --database-url) at the server to use\n")
	require.Less(t, time.Since(began), 10*time.Second, "a refused connection fails fast, not after --retry-timeout (30s)")

	r = cliEnv(t, map[string]string{"DATABASE_URL": "postgres://app:s3cret@127.0.0.1:1/prod"}, "status", "x", "--interval", "PT5M")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "cannot reach the database app@127.0.0.1:1/prod (from DATABASE_URL)")
	require.NotContains(t, r.stderr, "s3cret")

	// The schema-not-migrated message names the database it looked in.
	schema := freshSchema(t, "cli_unmigrated_")
	r = cli(t, "--schema", schema, "series", "list")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "almanac: schema not migrated in "+dbtarget.DescribeURL(pgtest.URL(t))+": schema \""+schema+"\" lacks migration")
	require.Contains(t, r.stderr, "migrate up")

	// The tests find their server by the same rule when nothing is set.
	require.Equal(t, "postgres@127.0.0.1:5432/postgres", dbtarget.DescribeURL(dbtarget.DefaultURL(func(string) string { return "" })))
}

// withPassword returns the test server's URL with a password in it. The
// test server trusts every connection: the password is not checked, but
// almanac has it.
func withPassword(t *testing.T, password string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// TestPasswordFlagWarns: a password given on the command line, which every
// local user can read, draws a one-line warning; the command still runs.
func TestPasswordFlagWarns(t *testing.T) {
	t.Parallel() // its own schema
	schema := migrated(t)
	for _, tt := range []struct {
		flags []string
		warn  string
	}{
		{[]string{"--database-url", withPassword(t, "s3cret")}, "--database-url"},
		{[]string{"--listen-url", withPassword(t, "s3cret")}, "--listen-url"},
		{[]string{"--database-url", pgtest.URL(t), "--listen-url", pgtest.URL(t)}, ""},
	} {
		r := cliEnv(t, map[string]string{"DATABASE_URL": pgtest.URL(t)}, append(tt.flags, "--schema", schema, "series", "list")...)
		requireOK(t, r)
		if tt.warn == "" {
			require.Empty(t, r.stderr)
			continue
		}
		require.Regexp(t, `^almanac: warning: the password in `+tt.warn+` can be read by every local user \(ps, /proc/\d+/cmdline\); set \S+, PGPASSWORD or a ~/.pgpass file instead\n$`, r.stderr)
		require.NotContains(t, r.stderr, "s3cret")
	}
}

func TestHasPassword(t *testing.T) {
	for conn, want := range map[string]bool{
		"postgres://app:s3cret@db/prod":                true,
		"postgresql://app:s3cret@h1:5432,h2:5433/prod": true,
		"postgres://db/prod?user=app&password=s3cret":  true,
		"host=db user=app password=s3cret dbname=prod": true,
		"password = 's3 cret' host=db":                 true,
		"postgres://app@db:5432/prod":                  false,
		"postgres://db/prod?sslmode=require":           false,
		"host=db user=app dbname=prod":                 false,
		"host=db passfile=/etc/almanac/pgpass":         false,
		"":                                             false,
	} {
		require.Equal(t, want, hasPassword(conn), "%q", conn)
	}
}
