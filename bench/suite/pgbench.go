package suite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The ceilings: pgbench doing the same claim and completion as a mode, on
// a bare table (a bigint key, a state, a run counter), at the same
// concurrency, in the same run. It is what the server can do for that
// shape of work with no scheduler at all: no series, no fencing, no
// history, no settings per transaction. Every row must end with one run.

// shape is a pgbench script of one mode's work.
type shape struct {
	name   string
	batch  int // rows per script run
	script string
}

var (
	shapeLocked1 = shape{"locked1", 1, `BEGIN;
SELECT id FROM {{schema}}.q WHERE state = 0 ORDER BY id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED \gset
UPDATE {{schema}}.q SET state = 2, runs = runs + 1 WHERE id = :id;
COMMIT;
`}
	shapeLocked100 = shape{"locked100", batchSize, `BEGIN;
SELECT array_agg(id) AS ids FROM (SELECT id FROM {{schema}}.q WHERE state = 0 ORDER BY id LIMIT ` + strconv.Itoa(batchSize) + ` FOR NO KEY UPDATE SKIP LOCKED) s \gset
UPDATE {{schema}}.q SET state = 2, runs = runs + 1 WHERE id = ANY(:ids);
COMMIT;
`}
	shapeLease100 = shape{"lease100", batchSize, `WITH c AS (UPDATE {{schema}}.q SET state = 1, owner = :client_id, lease_until = now() + interval '30 seconds' WHERE id IN (SELECT id FROM {{schema}}.q WHERE state = 0 ORDER BY id LIMIT ` + strconv.Itoa(batchSize) + ` FOR NO KEY UPDATE SKIP LOCKED) RETURNING id) SELECT array_agg(id) AS ids FROM c \gset
UPDATE {{schema}}.q SET state = 2, runs = runs + 1 WHERE id = ANY(:ids) AND owner = :client_id AND state = 1;
`}
)

// pgbench runs the ceilings: the program, its table's schema and a
// directory holding the scripts (and a password file, when the database
// needs a password: it is never put in the child's environment).
type pgbench struct {
	path   string
	schema *schema
	dir    string
	env    []string
}

// ceiling returns the measurement of shape's ceiling over about n rows at
// clients concurrency, or nil and why pgbench cannot be run here.
func (e *env) ceiling(ctx context.Context, sh shape, n, clients int) (measurement, string) {
	if e.pgbench == nil && e.pgbenchWhy == "" {
		e.pgbench, e.pgbenchWhy = e.newPgbench(ctx)
	}
	if e.pgbench == nil {
		return nil, e.pgbenchWhy
	}
	return func(ctx context.Context) (float64, error) { return e.pgbench.run(ctx, sh, n, clients) }, ""
}

// findPgbench looks for pgbench on PATH, then in Debian's versioned
// directories.
func findPgbench() string {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(dirs) > 0 {
		return dirs[len(dirs)-1]
	}
	return ""
}

func (e *env) newPgbench(ctx context.Context) (*pgbench, string) {
	path := e.opts.Pgbench
	if path == "" {
		path = findPgbench()
	}
	if path == "" {
		return nil, "pgbench not found (apt-get install -y postgresql-client-15, or --pgbench PATH)"
	}
	name, err := e.createSchema(ctx, "pgbench")
	if err != nil {
		return nil, err.Error()
	}
	s := &schema{e: e, name: name}
	p := &pgbench{path: path, schema: s}
	if _, err := s.exec(ctx, `CREATE TABLE {{schema}}.q (id bigint PRIMARY KEY, state smallint NOT NULL DEFAULT 0,
		runs int NOT NULL DEFAULT 0, owner int, lease_until timestamptz);
		CREATE INDEX q_available ON {{schema}}.q (id) WHERE state = 0`); err != nil {
		s.drop()
		return nil, fmt.Sprintf("create pgbench's table: %v", err)
	}
	if p.dir, err = os.MkdirTemp("", "almanac-bench-pgbench-"); err != nil {
		s.drop()
		return nil, err.Error()
	}
	cfg := e.admin.Config().ConnConfig
	p.env = append(withoutLibpq(os.Environ()),
		"PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)), "PGUSER="+cfg.User, "PGDATABASE="+cfg.Database,
		"PGAPPNAME=almanac-bench")
	if cfg.TLSConfig == nil {
		p.env = append(p.env, "PGSSLMODE=disable")
	} else {
		p.env = append(p.env, "PGSSLMODE=require")
	}
	if cfg.Password != "" {
		pass := filepath.Join(p.dir, "pgpass")
		line := fmt.Sprintf("*:*:*:*:%s\n", strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(cfg.Password))
		if err := os.WriteFile(pass, []byte(line), 0o600); err != nil {
			p.close()
			return nil, err.Error()
		}
		p.env = append(p.env, "PGPASSFILE="+pass)
	}
	return p, ""
}

// withoutLibpq drops the libpq and DATABASE_URL variables from env: the
// child gets the benchmarked database's, and no password.
func withoutLibpq(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

func (p *pgbench) close() {
	if p == nil {
		return
	}
	p.schema.drop()
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// run loads about n rows (a whole number of script runs per client),
// runs sh with clients connections, each script run a pgbench
// "transaction", and returns rows per second as pgbench times it: from
// all clients connected to the last script run. Every row must have run
// exactly once.
func (p *pgbench) run(ctx context.Context, sh shape, n, clients int) (float64, error) {
	perClient := max(1, n/(clients*sh.batch))
	rows := perClient * clients * sh.batch
	s := p.schema
	if _, err := s.exec(ctx, `TRUNCATE {{schema}}.q`); err != nil {
		return 0, fmt.Errorf("pgbench: truncate: %w", err)
	}
	if _, err := s.exec(ctx, `INSERT INTO {{schema}}.q (id) SELECT generate_series(1, $1::bigint)`, rows); err != nil {
		return 0, fmt.Errorf("pgbench: load: %w", err)
	}
	if _, err := s.exec(ctx, `VACUUM ANALYZE {{schema}}.q`); err != nil {
		return 0, fmt.Errorf("pgbench: vacuum: %w", err)
	}
	if err := s.e.checkpoint(ctx); err != nil {
		return 0, err
	}
	script := filepath.Join(p.dir, sh.name+".sql")
	if err := os.WriteFile(script, []byte(render(sh.script, s.name)), 0o600); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, p.path, "--no-vacuum", "--protocol=prepared", "--client="+strconv.Itoa(clients),
		"--jobs="+strconv.Itoa(min(clients, 2)), "--transactions="+strconv.Itoa(perClient), "--file="+script)
	cmd.Env = p.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("pgbench %s: %w: %s", sh.name, err, strings.Join(strings.Fields(strings.TrimSpace(stderr.String())), " "))
	}
	m := tpsLine.FindSubmatch(stdout.Bytes())
	if m == nil {
		return 0, fmt.Errorf("pgbench %s: no tps in its output: %s", sh.name, lastLine(stdout.Bytes()))
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil || tps <= 0 {
		return 0, fmt.Errorf("pgbench %s: tps %q", sh.name, m[1])
	}
	var once, all int64
	err = p.schema.e.admin.QueryRow(ctx, render(`SELECT count(*) FILTER (WHERE runs = 1 AND state = 2), count(*) FROM {{schema}}.q`, s.name)).Scan(&once, &all)
	if err != nil {
		return 0, fmt.Errorf("pgbench: count: %w", err)
	}
	if once != int64(rows) || all != int64(rows) {
		return 0, fmt.Errorf("%w: pgbench %s: %d of %d rows ran exactly once", ErrNotExactlyOnce, sh.name, once, rows)
	}
	return tps * float64(sh.batch), nil
}

// lastLine returns the last non-empty line of out, for error messages.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
