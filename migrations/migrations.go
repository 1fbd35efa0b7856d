// Package migrations holds almanac's database schema as embedded, versioned
// SQL files and applies them.
//
// Each migration runs in its own transaction, which first locks the version
// table (see lockMigrations) and then re-reads the applied versions, so any number of processes may migrate the same
// schema at once: one applies, the others find the work done. Applying is
// re-runnable; a migration that is already recorded is never run again.
//
// Teams that run their own migration tool can print the SQL instead (SQL, or
// `almanac migrate sql`) and apply it as they like; the version table is then
// theirs to keep.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/pgversion"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/wake"
)

//go:embed sql/*.sql
var files embed.FS

// ErrNotMigrated is returned by Require when the schema is missing or older
// than this version of almanac expects.
var ErrNotMigrated = errors.New("schema not migrated")

// Migration is one versioned step of the schema, and when it was applied to
// a schema. SQL prints every step's SQL.
type Migration struct {
	// Version numbers the steps from 1, in the order they apply; Name says
	// what the step does, as its files are named (001_initial.up.sql).
	Version int
	Name    string
	// AppliedAt is when the step was applied to the schema Status read
	// (database clock); zero while it is pending, and in All's list.
	AppliedAt time.Time
	// up and down are templates in which {{schema}} stands for the quoted
	// schema name, {{schema_literal}} for that quoted name as a string
	// literal (never inside a dollar-quoted body: a schema name may hold
	// $$), and {{wake_channel}} for the schema's notification channel as a
	// string literal (see render).
	up, down string
}

// String returns the step as its files are named, e.g. "001_initial".
func (m Migration) String() string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

// upSQL returns the migration's SQL for schema.
func (m Migration) upSQL(schema string) string { return render(m.up, schema) }

// downSQL returns the SQL that undoes the migration for schema.
func (m Migration) downSQL(schema string) string { return render(m.down, schema) }

// render fills a migration's placeholders. The channel name is computed
// here, not in SQL, so that workers (package wake) and the schema's
// triggers cannot disagree on it; it is made of [a-z0-9_] only, so quoting
// it as a literal is trivial.
func render(sql, schema string) string {
	sql = strings.ReplaceAll(sql, "{{wake_channel}}", "'"+wake.Channel(schema)+"'")
	sql = strings.ReplaceAll(sql, "{{schema_literal}}", "'"+strings.ReplaceAll(sqlschema.Quote(schema), "'", "''")+"'")
	return sqlschema.Render(sql, schema)
}

// All returns every migration in version order.
func All() []Migration { return all }

// latest is the version the current code expects; versions run from 1
// without holes, so it is also len(All()).
func latest() int { return all[len(all)-1].Version }

var all = mustLoad()

func mustLoad() []Migration {
	ms, err := load(files)
	if err != nil {
		// The files are embedded at build time; a broken set is a programming
		// error caught by the package's tests, never a user's problem.
		panic(err)
	}
	return ms
}

// load reads files named NNN_name.up.sql and NNN_name.down.sql.
func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, "sql")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		base := e.Name()
		var direction string
		switch {
		case strings.HasSuffix(base, ".up.sql"):
			direction = "up"
		case strings.HasSuffix(base, ".down.sql"):
			direction = "down"
		default:
			return nil, fmt.Errorf("migrations: unexpected file %s", base)
		}
		stem := strings.TrimSuffix(base, "."+direction+".sql")
		num, name, ok := strings.Cut(stem, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migrations: file %s is not named NNN_name.%s.sql", base, direction)
		}
		body, err := fs.ReadFile(fsys, path.Join("sql", base))
		if err != nil {
			return nil, err
		}
		m := byVersion[version]
		if m == nil {
			m = &Migration{Version: version, Name: name}
			byVersion[version] = m
		} else if m.Name != name {
			return nil, fmt.Errorf("migrations: version %d has two names, %s and %s", version, m.Name, name)
		}
		if direction == "up" {
			m.up = string(body)
		} else {
			m.down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("migrations: version %d needs both an up and a down file", m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: versions must be 1, 2, 3…; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

// SQL returns every up migration for schema as one plain SQL script, with
// the statements that record each version, for teams that apply migrations
// with their own tool.
func SQL(schema string) (string, error) {
	if err := sqlschema.Check(schema); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- almanac schema %s, migrations 1 to %d.\n", sqlschema.Quote(schema), latest())
	b.WriteString("-- Generated by `almanac migrate sql`; each migration is one transaction.\n\n")
	for _, m := range all {
		fmt.Fprintf(&b, "-- %s\nBEGIN;\n", m)
		if m.Version == 1 {
			b.WriteString(sqlschema.Render(schemaSQL+"\n"+versionTableSQL, schema))
			b.WriteString("\n")
		}
		b.WriteString(strings.TrimSpace(m.upSQL(schema)))
		fmt.Fprintf(&b, "\nINSERT INTO %s.schema_migrations (version, name) VALUES (%d, '%s');\nCOMMIT;\n\n",
			sqlschema.Quote(schema), m.Version, m.Name)
	}
	return b.String(), nil
}

// DB is what the migrator needs: *pgxpool.Pool and *pgx.Conn satisfy it.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// txOptions pins the isolation level: a role whose default is serializable
// must not turn concurrent migrations into serialization failures.
var txOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

const (
	schemaSQL       = `CREATE SCHEMA IF NOT EXISTS {{schema}};`
	versionTableSQL = `CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);`
)

// Up applies every migration that schema does not have yet, in order, each
// in its own transaction, and returns the versions it applied. It is safe to
// call from many processes at once.
//
// When the schema is current, Up only reads the version table: it takes no
// lock and needs no privilege beyond SELECT on it, so a runtime role that
// cannot change the schema (see Grants) may call it at every start. Only
// when a migration is pending does it take the migration lock, create the
// schema if it is missing (which needs CREATE on the database; a schema the
// migrating role owns needs nothing more) and apply what is missing. On a
// server older than PostgreSQL 14 it applies nothing and returns an error
// wrapping ErrServerVersion.
//
// With to, Up applies the pending migrations up to version to only, for a
// staged upgrade (apply 3, deploy, then the rest); a schema already past to
// is left as it is. More than one to, or one outside 1 to the latest version, is an
// error matching the module's ErrInvalid (almanac.ErrInvalid).
func Up(ctx context.Context, db DB, schema string, to ...int) ([]int, error) {
	if err := sqlschema.Check(schema); err != nil {
		return nil, err
	}
	last := latest()
	if len(to) > 1 || len(to) == 1 && (to[0] < 1 || to[0] > last) {
		return nil, fmt.Errorf("%w: migrate up to version %v: expected one version from 1 to %d", input.ErrInvalid, to, last)
	}
	if len(to) == 1 {
		last = to[0]
	}
	if err := Require(ctx, db, schema); err == nil || !errors.Is(err, ErrNotMigrated) {
		return nil, err
	}
	server, err := pgversion.Of(ctx, db)
	if err != nil {
		return nil, err
	}
	if err := checkServer(server); err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all[:last] {
		done, err := inLockedTx(ctx, db, schema, func(tx pgx.Tx) (bool, error) {
			if err := createVersionTable(ctx, tx, schema); err != nil {
				return false, err
			}
			have, err := appliedVersions(ctx, tx, schema)
			if err != nil {
				return false, err
			}
			if _, ok := have[m.Version]; ok {
				return false, nil
			}
			if _, err := tx.Exec(ctx, m.upSQL(schema)); err != nil {
				return false, fmt.Errorf("migration %s: %w%s", m, err, privilegeHint(err))
			}
			_, err = tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ($1, $2)`, schema), m.Version, m.Name)
			return true, err
		})
		if err != nil {
			return applied, err
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// Down undoes applied migrations newer than version to, newest first, each
// in its own transaction. Down(ctx, db, schema, 0) removes everything
// almanac created, all slots included: the version table, and the schema
// itself when nothing else is left in it (a schema holding other objects is
// kept). It returns the versions it undid. Going below version 3 is refused,
// with nothing undone, while compacted ranges exist (see Client.MigrateDown
// in the root package).
func Down(ctx context.Context, db DB, schema string, to int) ([]int, error) {
	if err := sqlschema.Check(schema); err != nil {
		return nil, err
	}
	if to < 0 || to > latest() {
		return nil, fmt.Errorf("migrate down to version %d: expected 0 to %d", to, latest())
	}
	if to < 3 {
		if err := checkNoCompacted(ctx, db, schema); err != nil {
			return nil, err
		}
	}
	var undone []int
	for i := len(all) - 1; i >= 0 && all[i].Version > to; i-- {
		m := all[i]
		done, err := inLockedTx(ctx, db, schema, func(tx pgx.Tx) (bool, error) {
			have, err := appliedVersions(ctx, tx, schema)
			if err != nil || have == nil {
				return false, err
			}
			if _, ok := have[m.Version]; !ok {
				return false, nil
			}
			if _, err := tx.Exec(ctx, m.downSQL(schema)); err != nil {
				return false, fmt.Errorf("undo migration %s: %w", m, err)
			}
			_, err = tx.Exec(ctx, sqlschema.Render(unrecordSQL, schema), m.Version)
			return true, err
		})
		if err != nil {
			return undone, err
		}
		if done {
			undone = append(undone, m.Version)
		}
	}
	if to == 0 {
		_, err := inLockedTx(ctx, db, schema, func(tx pgx.Tx) (bool, error) {
			have, err := appliedVersions(ctx, tx, schema)
			if err != nil || have == nil || len(have) > 0 {
				return false, err
			}
			if _, err := tx.Exec(ctx, sqlschema.Render(dropVersionTableSQL, schema)); err != nil {
				return false, err
			}
			// Only an empty schema is dropped: anything else in it is not ours.
			var others bool
			err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)
				OR EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)
				OR EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1)`, schema).Scan(&others)
			if err == nil && !others {
				_, err = tx.Exec(ctx, sqlschema.Render(dropSchemaSQL, schema))
			}
			return err == nil, err
		})
		if err != nil {
			return undone, err
		}
	}
	return undone, nil
}

// checkNoCompacted refuses to go below version 3 while compacted ranges
// exist, before anything is undone: their finished slots have no row, and
// would become gaps that workers run again. Migration 3's down SQL refuses
// too, for scripts that run it by hand; this check keeps the versions
// above 3 from being undone first.
func checkNoCompacted(ctx context.Context, db DB, schema string) error {
	var ranges int64
	err := retry.Do(ctx, func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, txOptions)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		var exists bool
		table := sqlschema.Quote(schema) + ".slot_compacted"
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&ranges)
	})
	if err != nil || ranges == 0 {
		return err
	}
	return fmt.Errorf("cannot undo migration 3: %d compacted range(s) of finished slots would become gaps that workers run again; "+
		"re-open them first to keep them (almanac reopen), or discard them (almanac migrate down --discard, or DELETE FROM slot_compacted)", ranges)
}

// The statements Down runs besides the migrations' own, shared with
// DownPlan so that a dry run prints what Down does.
const (
	unrecordSQL         = `DELETE FROM {{schema}}.schema_migrations WHERE version = $1`
	dropVersionTableSQL = `DROP TABLE {{schema}}.schema_migrations`
	dropSchemaSQL       = `DROP SCHEMA {{schema}}`
)

// DownPlan returns the SQL that Down would run on schema to undo the
// migrations newer than version to, given the migrations as Status read
// them (those with an AppliedAt are undone): one transaction per applied
// migration newer than to, newest first, and with to = 0 the removal of the
// version table and (when nothing else is left in it) of the schema. It
// returns "" when no migration is applied. It runs nothing: the plan of a
// dry run.
func DownPlan(schema string, states []Migration, to int) (string, error) {
	if to < 0 || to > latest() {
		return "", fmt.Errorf("migrate down to version %d: expected 0 to %d", to, latest())
	}
	if err := sqlschema.Check(schema); err != nil {
		return "", err
	}
	have := map[int]bool{}
	for _, m := range states {
		if !m.AppliedAt.IsZero() {
			have[m.Version] = true
		}
	}
	if len(have) == 0 {
		return "", nil
	}
	var b strings.Builder
	for i := len(all) - 1; i >= 0 && all[i].Version > to; i-- {
		m := all[i]
		if !have[m.Version] {
			continue
		}
		fmt.Fprintf(&b, "-- undo %s\nBEGIN;\n%s\n%s;\nCOMMIT;\n\n", m, strings.TrimSpace(m.downSQL(schema)),
			strings.Replace(sqlschema.Render(unrecordSQL, schema), "$1", strconv.Itoa(m.Version), 1))
	}
	if to == 0 {
		fmt.Fprintf(&b, "-- remove the version table, and the schema when nothing else is left in it\nBEGIN;\n%s;\n%s;\nCOMMIT;\n",
			sqlschema.Render(dropVersionTableSQL, schema), sqlschema.Render(dropSchemaSQL, schema))
	}
	return b.String(), nil
}

// Status returns every migration with its applied time. A schema that does
// not exist yet has every migration pending.
func Status(ctx context.Context, db DB, schema string) ([]Migration, error) {
	if err := sqlschema.Check(schema); err != nil {
		return nil, err
	}
	var have map[int]time.Time
	err := retry.Do(ctx, func(ctx context.Context) error {
		tx, err := db.BeginTx(ctx, txOptions)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		have, err = appliedVersions(ctx, tx, schema)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(all))
	for i, m := range all {
		m.AppliedAt = have[m.Version]
		out[i] = m
	}
	return out, nil
}

// Require returns nil when schema has every migration this code expects, and
// otherwise an error wrapping ErrNotMigrated that says what to run.
func Require(ctx context.Context, db DB, schema string) error {
	states, err := Status(ctx, db, schema)
	if err != nil {
		return err
	}
	for _, s := range states {
		if s.AppliedAt.IsZero() {
			return fmt.Errorf("%w: schema %s lacks migration %s; run `almanac --schema %s migrate up` (or migrations.Up)",
				ErrNotMigrated, sqlschema.Quote(schema), s, shellQuote(schema))
		}
	}
	return nil
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// createVersionTable creates the schema, when it does not exist, and the
// version table in it. CREATE SCHEMA IF NOT EXISTS would need CREATE on the
// database even when the schema exists, so it only runs when it is missing.
func createVersionTable(ctx context.Context, tx pgx.Tx, schema string) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.Exec(ctx, sqlschema.Render(schemaSQL, schema)); err != nil {
			return fmt.Errorf("create schema %s: %w%s", sqlschema.Quote(schema), err, privilegeHint(err))
		}
	}
	if _, err := tx.Exec(ctx, sqlschema.Render(versionTableSQL, schema)); err != nil {
		return fmt.Errorf("create %s.schema_migrations: %w%s", sqlschema.Quote(schema), err, privilegeHint(err))
	}
	return nil
}

// privilegeHint says what to do about a permission error during a
// migration: migrate as the role that owns the schema.
func privilegeHint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return "; migrations need the migration role, which owns the schema (see `almanac migrate grants`)"
	}
	return ""
}

// appliedVersions returns the applied versions and their times, or nil when
// the version table does not exist.
func appliedVersions(ctx context.Context, tx pgx.Tx, schema string) (map[int]time.Time, error) {
	var exists bool
	err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, sqlschema.Quote(schema)+".schema_migrations").Scan(&exists)
	if err != nil || !exists {
		return nil, err
	}
	rows, err := tx.Query(ctx, sqlschema.Render(`SELECT version, applied_at FROM {{schema}}.schema_migrations`, schema))
	if err != nil {
		return nil, err
	}
	have := map[int]time.Time{}
	var v int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error { have[v] = at; return nil })
	return have, err
}

// inLockedTx runs fn in a transaction holding the schema's migration lock,
// committing when fn returns true and rolling back otherwise. Role settings
// such as a short statement_timeout must not break a migration, so they are
// overridden for the transaction. The transaction is repeated after a
// transient fault: fn re-reads the applied versions under the lock, so a
// step that did commit is not applied twice.
func inLockedTx(ctx context.Context, db DB, schema string, fn func(pgx.Tx) (bool, error)) (bool, error) {
	var changed bool
	err := retry.Do(ctx, func(ctx context.Context) (err error) {
		changed, err = inLockedTxOnce(ctx, db, schema, fn)
		return err
	})
	return changed, err
}

// errLocked is returned, wrapped, when the migration lock of a schema that
// has no version table yet stays taken for bootstrapWait.
var errLocked = errors.New("migration lock held")

// bootstrapWait bounds the wait for the migration lock of a schema that
// has no version table yet: that lock is an advisory one, which any role
// can take. Creating the version table takes a fraction of a second.
var bootstrapWait = 10 * time.Second

// lockMigrations takes the schema's migration lock for the rest of tx: the
// version table, locked SHARE ROW EXCLUSIVE. That mode excludes another
// migrator and the inserts of the version table, not its readers (Require,
// Status), and only a role that may write the table can take it: the
// runtime role reads it, and a role with no grant cannot name it. Before
// the version table exists there is no table to lock, so the first
// migrators queue on an advisory lock keyed by the schema, for at most
// bootstrapWait: any role may take that key, and a migration must fail
// with a message saying so rather than wait on it for ever. Once the
// table has been created (by this transaction, or by a migrator that
// committed while this one waited), the table's lock is taken as well.
func lockMigrations(ctx context.Context, tx pgx.Tx, schema string) error {
	table := sqlschema.Quote(schema) + ".schema_migrations"
	exists := func() (bool, error) {
		var ok bool
		err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok)
		return ok, err
	}
	ok, err := exists()
	if err != nil {
		return err
	}
	if !ok {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, bootstrapWait.Milliseconds())); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "almanac.migrate:"+schema)
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return fmt.Errorf("%w: waited %s for the lock that creates %s; another session holds the advisory lock hashtextextended('almanac.migrate:%s', 0) (see pg_locks where locktype = 'advisory')",
				errLocked, bootstrapWait, table, schema)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return err
		}
		if ok, err = exists(); err != nil || !ok {
			return err
		}
	}
	_, err = tx.Exec(ctx, `LOCK TABLE `+table+` IN SHARE ROW EXCLUSIVE MODE`)
	return err
}

func inLockedTxOnce(ctx context.Context, db DB, schema string, fn func(pgx.Tx) (bool, error)) (bool, error) {
	tx, err := db.BeginTx(ctx, txOptions)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0;
		SET LOCAL idle_in_transaction_session_timeout = 0`); err != nil {
		return false, err
	}
	if err := lockMigrations(ctx, tx, schema); err != nil {
		return false, err
	}
	changed, err := fn(tx)
	if err != nil || !changed {
		return false, err
	}
	return true, tx.Commit(ctx)
}
