package almanac

import (
	"context"

	"github.com/almanacdev/almanac/migrations"
)

// Schema management. The schema is embedded, versioned SQL (package
// migrations); teams that apply migrations with their own tool print it
// with migrations.SQL (`almanac migrate sql`).

// Migration is one versioned step of the schema and when it was applied
// (AppliedAt, zero while pending). Its fields are documented at
// migrations.Migration, where the schema's steps are defined.
type Migration = migrations.Migration

// Migrate creates or upgrades almanac's tables in the schema and returns
// the versions it applied (none when the schema is current). It is safe to
// run from every instance at start-up, concurrently, and when the schema is
// current it only reads the version table, so a role that cannot change the
// schema may run it (see migrations.Grants for the two roles).
//
// With to, it applies the pending migrations up to version to only, for a
// staged upgrade (see migrations.Up); more than one to, or one outside 1
// to migrations.Latest(), is an error wrapping ErrInvalid.
//
// Like every call of the Client, it retries transient faults within
// Options.RetryBudget.
func (c *Client) Migrate(ctx context.Context, to ...int) ([]int, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	return migrations.Up(ctx, c.pool, c.opts.Schema, to...)
}

// MigrateDown undoes the applied migrations newer than version to, newest
// first, and returns the versions it undid. MigrateDown(ctx, 0) removes
// everything almanac created, every slot and its history included, and the
// schema when nothing else is left in it. Undoing migration 3 is refused,
// with an error saying so and nothing undone past it, while compacted
// ranges exist: their finished slots have no row and would become gaps
// that workers run again. Re-open them first to keep them, or delete the
// rows of slot_compacted to discard them.
func (c *Client) MigrateDown(ctx context.Context, to int) ([]int, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	return migrations.Down(ctx, c.pool, c.opts.Schema, to)
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
