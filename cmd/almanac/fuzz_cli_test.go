package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/schedule"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// flagCase puts a fuzzed value into one free-text argument of one command.
type flagCase struct {
	name string
	// args builds the command line around v (after the global flags).
	args func(v string) []string
	// bad returns the reason v must be refused before anything connects,
	// or nil when it may pass the command line's checks.
	bad func(v string) error
	// safe: with a valid value the command writes nothing against the
	// fixture (a read, or a dry run), so it may run on the database.
	safe bool
}

// eq writes a flag with its value in one argument, so that a value
// starting with "-" is still read as the value.
func eq(flag, v string) string { return "--" + flag + "=" + v }

// withDay adds a one-day range.
func withDay(args ...string) []string {
	return append(args, "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z")
}

// nameErr is input.CheckName, but a word starting with "-" is read as a
// flag, which may be --help: no claim is made about those.
func nameErr(v string) error {
	if strings.HasPrefix(v, "-") {
		return nil
	}
	return input.CheckName(v)
}

func skipReasonErr(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("required")
	}
	return input.CheckReason(v)
}

func durationErr(flag string) func(string) error {
	return func(v string) error { _, err := parseDuration(flag, v); return err }
}

func originErr(v string) error {
	o, err := slot.ParseTime(v, time.UTC)
	if err == nil {
		_, err = slot.NewSeries("x", mustInterval("P1D"), time.UTC, o)
	}
	return err
}

// flagCases are the free-text flags and arguments of every command. (The
// database URL is left out: a valid one makes the CLI connect to whatever
// host the fuzzer wrote. The global flags that only shape connections are
// given to migrate sql, which connects to nothing: a fuzzed --retry-timeout
// of an hour must not make a case wait for it.)
var flagCases = []flagCase{
	{"reopen --reason", func(v string) []string {
		return withDay("reopen", "sensor", "--interval", "PT5M", eq("reason", v))
	}, input.CheckReason, true},
	{"skip --reason", func(v string) []string {
		return withDay("skip", "sensor", "--interval", "PT5M", eq("reason", v))
	}, skipReasonErr, true},
	{"retry --actor", func(v string) []string {
		return withDay("retry", "sensor", "--interval", "PT5M", eq("actor", v))
	}, func(v string) error {
		if v == "" {
			return nil // the default actor
		}
		return input.CheckActor(v)
	}, true},
	{"history SLOT", func(v string) []string { return []string{"history", "sensor", v, "--interval", "PT5M"} }, func(v string) error {
		if strings.HasPrefix(v, "-") {
			return nil // read as a flag
		}
		if strings.Contains(v, "/") {
			return checkSlotSyntax(v)
		}
		return slot.CheckTime(v)
	}, true},
	{"skip --slot", func(v string) []string {
		return []string{"skip", "sensor", "--interval", "PT5M", "--reason", "r", eq("slot", v)}
	}, func(v string) error {
		if v == "" {
			return errors.New("--slot or a range")
		}
		return checkSlotSyntax(v)
	}, true},
	{"reopen --states", func(v string) []string {
		return withDay("reopen", "sensor", "--interval", "PT5M", eq("states", v))
	}, func(v string) error { _, err := parseStates(v); return err }, true},
	{"status NAME", func(v string) []string { return []string{"status", v, "--interval", "PT5M"} }, nameErr, true},
	{"gaps NAME", func(v string) []string { return withDay("gaps", v, "--interval", "PT5M") }, nameErr, true},
	{"materialize NAME", func(v string) []string { return withDay("materialize", v, "--interval", "PT5M") }, nameErr, true},
	{"series add NAME", func(v string) []string { return []string{"series", "add", v, "--interval", "PT5M"} }, nameErr, false},
	{"series add --interval", func(v string) []string { return []string{"series", "add", "x", eq("interval", v)} }, func(v string) error {
		_, err := slot.ParseInterval(v)
		return err
	}, false},
	{"gaps --interval", func(v string) []string { return withDay("gaps", "sensor", eq("interval", v)) }, func(v string) error {
		if v == "" {
			return nil // the name's only interval
		}
		_, err := slot.ParseInterval(v)
		return err
	}, true},
	{"series add --tz", func(v string) []string { return []string{"series", "add", "x", "--interval", "P1D", eq("tz", v)} }, func(v string) error {
		_, err := slot.LoadZone(v)
		return err
	}, false},
	{"series add --origin", func(v string) []string {
		return []string{"series", "add", "x", "--interval", "P1D", "--tz", "UTC", eq("origin", v)}
	}, func(v string) error {
		if v == "" {
			return nil
		}
		return originErr(v)
	}, false},
	{"reopen --from", func(v string) []string {
		return []string{"reopen", "berlin", "--interval", "P1D", eq("from", v), "--to", "2026-03-02"}
	}, slot.CheckTime, true},
	{"retry --to", func(v string) []string {
		return []string{"retry", "berlin", "--interval", "P1D", "--from", "2026-03-01", eq("to", v)}
	}, slot.CheckTime, true},
	{"materialize --max-slots", func(v string) []string {
		return withDay("materialize", "sensor", "--interval", "PT5M", eq("max-slots", v))
	}, func(v string) error {
		n, err := strconv.ParseInt(v, 0, 64) // as the flag package reads it
		if err == nil && n <= 0 {
			err = errors.New("not positive")
		}
		return err
	}, true},
	{"--schema", func(v string) []string { return []string{eq("schema", v), "series", "list"} }, sqlschema.Check, true},
	{"--pooler", func(v string) []string { return []string{eq("pooler", v), "migrate", "sql"} }, func(v string) error {
		_, err := parsePooler(v)
		return err
	}, true},
	{"--listen-url", func(v string) []string { return []string{eq("listen-url", v), "migrate", "sql"} }, func(v string) error {
		if v == "" {
			return nil
		}
		_, err := pgx.ParseConfig(v)
		return err
	}, true},
	{"--retry-timeout", func(v string) []string { return []string{eq("retry-timeout", v), "migrate", "sql"} }, func(v string) error {
		d, err := input.ParseDuration(v)
		if err == nil && d <= 0 {
			err = errors.New("not positive")
		}
		return err
	}, true},
	{"run NAME", func(v string) []string { return []string{"run", v, "--interval", "PT5M", "--", "true"} }, nameErr, false},
	{"run --schedule", func(v string) []string {
		return []string{"run", "x", "--interval", "PT5M", eq("schedule", v), "--", "true"}
	}, func(v string) error {
		if v == "" {
			return nil
		}
		_, err := schedule.Parse(v)
		return err
	}, false},
	{"run --lag", func(v string) []string { return []string{"run", "x", "--interval", "PT5M", eq("lag", v), "--", "true"} }, durationErr("lag"), false},
	{"run --timeout", func(v string) []string {
		return []string{"run", "x", "--interval", "PT5M", eq("timeout", v), "--", "true"}
	}, durationErr("timeout"), false},
	{"run --catch-up", func(v string) []string {
		return []string{"run", "x", "--interval", "PT5M", eq("catch-up", v), "--", "true"}
	}, func(v string) error { _, err := parseCatchUp(v); return err }, false},
	{"run --tz", func(v string) []string { return []string{"run", "x", "--interval", "PT5M", eq("tz", v), "--", "true"} }, func(v string) error {
		_, err := slot.LoadZone(v)
		return err
	}, false},
	{"run --from", func(v string) []string {
		return []string{"run", "x", "--interval", "PT5M", eq("from", v), "--", "true"}
	}, func(v string) error {
		if v == "" {
			return nil
		}
		return slot.CheckTime(v)
	}, false},
	{"failures NAME", func(v string) []string { return []string{"failures", v} }, func(v string) error {
		if strings.HasPrefix(v, "-") {
			return nil // read as a flag
		}
		return input.CheckName(v)
	}, true},
	{"failures --from", func(v string) []string { return []string{"failures", eq("from", v)} }, func(v string) error {
		if v == "" {
			return nil
		}
		return slot.CheckTime(v)
	}, true},
	{"--log-level", func(v string) []string { return []string{eq("log-level", v), "failures"} }, func(v string) error {
		if !validLevel(v) {
			return errors.New("not a level")
		}
		return nil
	}, true},
	{"--log-format", func(v string) []string { return []string{eq("log-format", v), "failures"} }, func(v string) error {
		if v != "" && v != "text" && v != "json" {
			return errors.New("not a format")
		}
		return nil
	}, true},
	{"run --http", func(v string) []string {
		return []string{"run", "x", "--interval", "PT5M", eq("http", v), "--", "true"}
	}, func(v string) error {
		if v == "" {
			return nil
		}
		_, err := httpAddr(v)
		return err
	}, false},
	{"migrate grants --runtime", func(v string) []string {
		return []string{"migrate", "grants", eq("runtime", v), "--migrator", "owner"}
	}, func(v string) error {
		_, err := migrations.Grants("almanac", v, "owner")
		return err
	}, true},
	{"migrate down --to", func(v string) []string { return []string{"migrate", "down", eq("to", v)} }, func(v string) error {
		n, err := strconv.ParseInt(v, 0, 64) // as the flag package reads it
		if err == nil && (n < 0 || n > int64(len(migrations.All()))) {
			err = errors.New("no such version")
		}
		return err
	}, false},
}

// seedValues are typical good and bad values, tried with every case.
var seedValues = []string{"", "x", "sensor", "PT5M", "P8000Y", "P1D", "2026-03-01", "20260301", "2026-03-01T25:00",
	"9999-12-31T02:00", "late\xffdata", "esc\x1b[2J", "\u202eevil", "zero\u200bwidth", "nul\x00", strings.Repeat("r", 1500),
	"pg_catalog", "information_schema", "0 0 30 2 *", "0 0 29 2 *", "CRON_TZ=Europe/Berlin 0 2 * * *", "TZ=", "1m", "-1s",
	"Europe/Berlin", "Local", "latest:3", "COMPLETE,SKIP", "2026-03-01T00:00:00Z/PT5M", "--help", "-x", "1", "0", "-1",
	`x"; DROP SCHEMA public CASCADE; --`}

// checkOutcome asserts what every invocation owes its caller: an exit code
// of the contract, and for bad input exactly one line on stderr naming the
// problem and nothing on stdout.
func checkOutcome(t *testing.T, c flagCase, v string, code int, stdout, stderr string) {
	t.Helper()
	if code < 0 || code > 3 {
		t.Fatalf("%s %q: exit %d", c.name, v, code)
	}
	if err := c.bad(v); err != nil && code != exitUsage {
		t.Fatalf("%s %q is bad input (%v) but exited %d: %s", c.name, v, err, code, stderr)
	}
	if code == exitUsage {
		if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "almanac: ") || stdout != "" {
			t.Fatalf("%s %q: exit 2 must print one line on stderr and nothing on stdout; stderr %q stdout %q", c.name, v, stderr, stdout)
		}
	}
	if code != exitOK && !strings.HasPrefix(stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:], "almanac: ") {
		t.Fatalf("%s %q: exit %d without an error line: %q", c.name, v, code, stderr)
	}
	if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
		t.Fatalf("%s %q: %s", c.name, v, stderr)
	}
}

func runCase(args []string, env map[string]string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &stdout, &stderr, func(k string) string { return env[k] })
	return code, stdout.String(), stderr.String()
}

// FuzzCLIFlags gives every free-text flag of every command fuzzed values,
// in process, with the database unreachable: bad input must exit 2 with one
// line before anything connects; anything else exits 0 to 3.
func FuzzCLIFlags(f *testing.F) {
	for i := range flagCases {
		for _, v := range seedValues {
			f.Add(uint8(i), v)
		}
	}
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ALMANAC_RETRY_TIMEOUT": "10ms"}
	f.Fuzz(func(t *testing.T, which uint8, v string) {
		c := flagCases[int(which)%len(flagCases)]
		args := c.args(v)
		if c.name == "migrate down --to" {
			args = append(args, "--yes")
		}
		code, stdout, stderr := runCase(args, env)
		checkOutcome(t, c, v, code, stdout, stderr)
	})
}

// FuzzCLIDatabase runs the same cases against a schema holding series and
// slots in every state: bad input must exit 2 with one line and write
// nothing, even without --dry-run; good input to the commands that can
// take it (reads and dry runs) must write nothing either.
func FuzzCLIDatabase(f *testing.F) {
	for i := range flagCases {
		for _, v := range seedValues {
			f.Add(uint8(i), v)
		}
	}
	schema := fuzzFixture(f)
	env := map[string]string{"DATABASE_URL": pgtest.URL(f), "ALMANAC_RETRY_TIMEOUT": "2s"}
	before := fixtureState(f, schema)
	f.Fuzz(func(t *testing.T, which uint8, v string) {
		c := flagCases[int(which)%len(flagCases)]
		malformed := c.bad(v) != nil
		if !malformed && !c.safe {
			return // it would write, or run the sidecar: FuzzCLIFlags covers it
		}
		args := c.args(v)
		switch args[0] {
		case "reopen", "skip", "retry", "materialize":
			if !malformed {
				args = append(args, "--dry-run")
			}
		}
		if !strings.HasPrefix(args[0], "--schema=") {
			args = append([]string{"--schema", schema}, args...)
		}
		code, stdout, stderr := runCase(args, env)
		checkOutcome(t, c, v, code, stdout, stderr)
		if after := fixtureState(t, schema); after != before {
			t.Fatalf("%s %q (exit %d) wrote to the database: %s", c.name, v, code, stderr)
		}
	})
}

// fuzzFixture is a migrated schema with a PT5M series "sensor" whose slots
// are in every state, and a P1D series "berlin" in Europe/Berlin.
func fuzzFixture(tb testing.TB) string {
	tb.Helper()
	schema := pgtest.Schema(tb)
	ctx := context.Background()
	pool := pgtest.Pool(tb)
	if _, err := migrations.Up(ctx, pool, schema); err != nil {
		tb.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": pgtest.URL(tb)}
	for _, args := range [][]string{
		{"series", "add", "sensor", "--interval", "PT5M"},
		{"series", "add", "berlin", "--interval", "P1D", "--tz", "Europe/Berlin"},
		{"materialize", "sensor", "--interval", "PT5M", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T02:00:00Z"},
		{"materialize", "berlin", "--interval", "P1D", "--from", "2026-03-01", "--to", "2026-03-05"},
	} {
		if code, _, stderr := runCase(append([]string{"--schema", schema}, args...), env); code != 0 {
			tb.Fatalf("%q: %s", args, stderr)
		}
	}
	for _, sql := range []string{
		`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE slot_start < '2026-03-01T01:00:00Z'`,
		`UPDATE {{schema}}.slot SET status = 'SKIP', message = 'outage' WHERE slot_start = '2026-03-01T01:00:00Z'`,
		`UPDATE {{schema}}.slot SET not_before = 'infinity', fail_count = 3 WHERE slot_start = '2026-03-01T01:05:00Z'`,
		`UPDATE {{schema}}.slot SET not_before = now() + interval '1 hour', fail_count = 1 WHERE slot_start = '2026-03-01T01:10:00Z'`,
	} {
		if _, err := pool.Exec(ctx, sqlschema.Render(sql, schema)); err != nil {
			tb.Fatal(err)
		}
	}
	return schema
}

// fixtureState fingerprints every row of the fixture's tables and its
// sequence.
func fixtureState(tb testing.TB, schema string) string {
	tb.Helper()
	var s string
	err := pgtest.Pool(tb).QueryRow(context.Background(), sqlschema.Render(`SELECT
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {{schema}}.series t) ||
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {{schema}}.slot t) ||
		(SELECT count(*) FROM {{schema}}.schema_migrations)::text ||
		(SELECT last_value || ' ' || is_called FROM {{schema}}.fence_seq)`, schema)).Scan(&s)
	if err != nil {
		tb.Fatal(fmt.Errorf("fixture state: %w", err))
	}
	return s
}
