package almanac

import (
	"context"
	"fmt"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/migrations"
)

// Schema management. The schema is embedded, versioned SQL (package
// migrations); teams that apply migrations with their own tool print it
// with MigrationSQL.

// DefaultSchema is the schema almanac uses when none is configured.
const DefaultSchema = sqlschema.Default

// Migration is one versioned step of the schema and when it was applied
// (AppliedAt zero while pending).
type Migration = migrations.State

// CheckSchema reports whether name can hold almanac's tables: a valid
// identifier that is not a system schema (pg_catalog, information_schema,
// any pg_ name). Errors wrap ErrInvalid's schema counterpart.
func CheckSchema(name string) error { return sqlschema.Check(name) }

// MigrationName returns the name of a schema version as its files are
// named, e.g. "001_initial", or the bare number of an unknown version.
func MigrationName(version int) string {
	for _, m := range migrations.All() {
		if m.Version == version {
			return fmt.Sprintf("%03d_%s", m.Version, m.Name)
		}
	}
	return fmt.Sprintf("%03d", version)
}

// LatestMigration is the schema version this code expects.
func LatestMigration() int { return migrations.Latest() }

// Migrate creates or upgrades almanac's tables in the schema and returns
// the versions it applied. It is safe to run from every instance at
// start-up, concurrently, and when the schema is current it only reads the
// version table, so a role that cannot change the schema may run it (see
// MigrationGrants for the two roles).
//
// Like every call of the Client, it retries transient faults within
// Options.RetryBudget.
func (c *Client) Migrate(ctx context.Context) error {
	_, err := c.MigrateUp(ctx)
	return err
}

// MigrateUp is Migrate that also returns the versions it applied.
func (c *Client) MigrateUp(ctx context.Context) ([]int, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	return migrations.Up(ctx, c.pool, c.opts.Schema)
}

// MigrateDown undoes the applied migrations newer than version to, newest
// first, and returns the versions it undid. MigrateDown(ctx, 0) removes
// everything almanac created, every slot and its history included, and the
// schema when nothing else is left in it.
func (c *Client) MigrateDown(ctx context.Context, to int) ([]int, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	return migrations.Down(ctx, c.pool, c.opts.Schema, to)
}

// MigrateDownPlan returns the SQL MigrateDown(ctx, to) would run, and runs
// nothing.
func (c *Client) MigrateDownPlan(ctx context.Context, to int) (string, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return "", err
	}
	return migrations.DownPlan(ctx, c.pool, c.opts.Schema, to)
}

// Migrations returns every migration with when it was applied to the
// schema.
func (c *Client) Migrations(ctx context.Context) ([]Migration, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	return migrations.Status(ctx, c.pool, c.opts.Schema)
}

// RequireMigrated returns nil when the schema has every migration this code
// expects, and otherwise an error wrapping ErrNotMigrated that says what to
// run.
func (c *Client) RequireMigrated(ctx context.Context) error {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return err
	}
	return migrations.Require(ctx, c.pool, c.opts.Schema)
}

// MigrationSQL returns every up migration for schema as one plain SQL
// script, with the statements that record each version.
func MigrationSQL(schema string) (string, error) { return migrations.SQL(schema) }

// MigrationGrants returns the SQL that gives a runtime role (workers,
// coverage operations) and a migration role (Migrate) the privileges they
// need on schema, and no more.
func MigrationGrants(schema, runtime, migrator string) (string, error) {
	return migrations.Grants(schema, runtime, migrator)
}
