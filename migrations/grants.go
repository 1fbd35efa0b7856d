package migrations

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// Grants returns the SQL that sets up two least-privilege roles for
// almanac's tables in schema, to be run once by a superuser or the
// database's owner after both roles exist (CREATE ROLE … LOGIN):
//
//   - migrator, the migration role, owns the schema. It can create, alter
//     and drop almanac's tables there, and needs no privilege on the
//     database itself: Up creates the schema only when it is missing.
//   - runtime, the role of workers, the CLI's everyday commands and the
//     sidecar, may read and write rows (SELECT, INSERT, UPDATE, DELETE on
//     the tables, USAGE and SELECT on the fencing sequence, EXECUTE on
//     functions) and nothing else: it cannot create, alter or drop
//     anything, nor rewrite the record: the slots' history (slot_event)
//     is read-only for it (the slot table's trigger writes it, as the
//     owner; old events are pruned through the schema's prune_history
//     function), so are the series' history (series_event, which the
//     series table's trigger writes), the version table and the schema's
//     settings. On the cap's permits (series_permit, created by a
//     trigger) it may only read and lock rows, and on the dependencies
//     (series_dependency) add, remove and lock the table, not update
//     rows. It can still call Up (Client.Migrate) at every start, which
//     only reads the version table when the schema is current.
//
// Tables, sequences and functions that later migrations create are covered
// by default privileges, provided the migrations run as migrator: an
// upgrade needs no new grants. Errors wrap sqlschema.ErrInvalid or
// sqlschema.ErrInvalidRole and name the bad name.
func Grants(schema, runtime, migrator string) (string, error) {
	if err := sqlschema.Check(schema); err != nil {
		return "", err
	}
	for _, role := range []string{runtime, migrator} {
		if err := sqlschema.CheckRole(role); err != nil {
			return "", err
		}
	}
	if runtime == migrator {
		return "", fmt.Errorf("%w: the runtime and the migration role are both %q; expected two roles, so that workers cannot change the schema",
			sqlschema.ErrInvalidRole, runtime)
	}
	s, r, m := sqlschema.Quote(schema), sqlschema.Quote(runtime), sqlschema.Quote(migrator)
	var b strings.Builder
	fmt.Fprintf(&b, `-- Least-privilege roles for almanac's schema %[1]s.
-- Run once as a superuser or the database owner, after creating both roles
-- (CREATE ROLE ... LOGIN). Run migrations (almanac migrate up, Client.Migrate)
-- as %[3]s; run workers, the sidecar and the other commands as %[2]s.
-- Both roles need CONNECT on the database (PUBLIC has it unless revoked).

-- The migration role owns the schema: it creates and alters almanac's tables
-- there, and needs no privilege on the database itself. (For a schema another
-- role created and migrated earlier, make the migration role the owner of the
-- schema and of each table, sequence and function in it: ALTER SCHEMA %[1]s
-- OWNER TO %[3]s; ALTER TABLE %[1]s.slot OWNER TO %[3]s; and so on.)
CREATE SCHEMA IF NOT EXISTS %[1]s AUTHORIZATION %[3]s;

-- The runtime role reads and writes rows, and nothing else: it cannot
-- create, alter or drop anything.
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[2]s;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %[1]s TO %[2]s;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %[1]s TO %[2]s;

-- ... except what would let it rewrite the record: the slots' history
-- (slot_event) is read-only for it (a trigger that runs as the owner writes
-- it), so are the series' history (series_event, the series table's
-- trigger writes it), the version table and the schema's settings;
-- the cap's permits (series_permit) it only reads and locks, and the
-- dependencies (series_dependency) it adds, removes and locks (migrations
-- 8, 9, 11 and 12 take the same back from tables created under the default privileges
-- below).
DO %[7]s
BEGIN
    IF to_regclass(%[4]s) IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %[1]s.slot_event FROM %[2]s;
    END IF;
    IF to_regclass(%[8]s) IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %[1]s.series_event FROM %[2]s;
    END IF;
    IF to_regclass(%[9]s) IS NOT NULL THEN
        REVOKE INSERT, DELETE, TRUNCATE ON %[1]s.series_permit FROM %[2]s;
    END IF;
    IF to_regclass(%[10]s) IS NOT NULL THEN
        REVOKE UPDATE, TRUNCATE ON %[1]s.series_dependency FROM %[2]s;
    END IF;
    IF to_regclass(%[5]s) IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %[1]s.schema_migrations FROM %[2]s;
    END IF;
    IF to_regclass(%[6]s) IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %[1]s.settings FROM %[2]s;
    END IF;
END
%[7]s;

-- The same on everything later migrations create, as %[3]s.
ALTER DEFAULT PRIVILEGES FOR ROLE %[3]s IN SCHEMA %[1]s
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %[2]s;
ALTER DEFAULT PRIVILEGES FOR ROLE %[3]s IN SCHEMA %[1]s
    GRANT USAGE, SELECT ON SEQUENCES TO %[2]s;
ALTER DEFAULT PRIVILEGES FOR ROLE %[3]s IN SCHEMA %[1]s
    GRANT EXECUTE ON FUNCTIONS TO %[2]s;
`, s, r, m, literal(s+".slot_event"), literal(s+".schema_migrations"), literal(s+".settings"), dollarTag(s+r),
		literal(s+".series_event"), literal(s+".series_permit"), literal(s+".series_dependency"))
	return b.String(), nil
}

// literal returns s as a SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// dollarTag returns a dollar-quote tag that text does not contain, so that
// a block quoted with it and holding text ends where it should.
func dollarTag(text string) string {
	tag := "$grants$"
	for i := 1; strings.Contains(text, tag); i++ {
		tag = "$grants" + strconv.Itoa(i) + "$"
	}
	return tag
}
