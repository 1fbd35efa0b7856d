package migrations_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/almanacdev/almanac/almanactest"
	"github.com/almanacdev/almanac/migrations"
)

// Migrating a schema at a program's start: Up applies what is missing and,
// once the schema is current, only reads its version table. Down to 0
// removes everything almanac created.
func Example() {
	ctx := context.Background()
	t := almanactest.ExampleTB()
	pool, schema := almanactest.Pool(t), almanactest.Schema(t) // in a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), schema "almanac"

	applied, err := migrations.Up(ctx, pool, schema)
	if err != nil {
		panic(err)
	}
	fmt.Println("applied every migration:", len(applied) == len(migrations.All()))
	again, err := migrations.Up(ctx, pool, schema)
	if err != nil {
		panic(err)
	}
	fmt.Println("applied by a second Up:", len(again))
	fmt.Println("current:", migrations.Require(ctx, pool, schema) == nil)

	if _, err := migrations.Down(ctx, pool, schema, 0); err != nil {
		panic(err)
	}
	fmt.Println("after Down to 0, not migrated:", errors.Is(migrations.Require(ctx, pool, schema), migrations.ErrNotMigrated))
	// Output:
	// applied every migration: true
	// applied by a second Up: 0
	// current: true
	// after Down to 0, not migrated: true
}
