package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// origin is where every benchmark series starts: slot k of a series is the
// minute origin + k, all of them due long ago.
var origin = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// minute is the interval of every benchmark series.
var minute = slot.MustParseInterval("PT1M")

// schema is a migrated schema of one scenario, dropped when it is done.
type schema struct {
	e    *env
	name string
}

// newSchema creates and migrates a schema named almanac_bench_<tag>_<random>.
func (e *env) newSchema(ctx context.Context, tag string) (*schema, error) {
	name, err := e.createSchema(ctx, tag)
	if err != nil {
		return nil, err
	}
	s := &schema{e: e, name: name}
	if _, err := migrations.Up(ctx, e.admin, name); err != nil {
		s.drop()
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return s, nil
}

// createSchema creates an empty schema named almanac_bench_<tag>_<random>.
func (e *env) createSchema(ctx context.Context, tag string) (string, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails
	name := "almanac_bench_" + tag + "_" + hex.EncodeToString(b)
	if _, err := e.admin.Exec(ctx, "CREATE SCHEMA "+sqlschema.Quote(name)); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	return name, nil
}

// dropSchema drops a schema and everything in it, even when ctx is done.
func (e *env) dropSchema(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = e.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+sqlschema.Quote(name)+" CASCADE")
}

func (s *schema) drop() { s.e.dropSchema(s.name) }

// series registers a PT1M UTC series from origin.
func (s *schema) series(ctx context.Context, name string) (slot.Series, error) {
	grid, err := slot.NewSeries(name, minute, time.UTC, time.Time{})
	if err != nil {
		return slot.Series{}, err
	}
	if _, _, err := seriesdb.Add(ctx, s.e.admin, s.name, grid); err != nil {
		return slot.Series{}, fmt.Errorf("register %s: %w", name, err)
	}
	return grid, nil
}

// exec runs sql, with {{schema}} standing for the schema, and returns the
// number of rows it affected.
func (s *schema) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := s.e.admin.Exec(ctx, sqlschema.Render(sql, s.name), args...)
	return tag.RowsAffected(), err
}

// count runs a query returning one number.
func (s *schema) count(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := s.e.admin.QueryRow(ctx, sqlschema.Render(sql, s.name), args...).Scan(&n)
	return n, err
}

// load inserts the first n slots of grid with status in one statement.
func (s *schema) load(ctx context.Context, grid slot.Series, n int, status string) error {
	_, err := s.exec(ctx, `INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status)
		SELECT $1, $2, $3::timestamptz + g * interval '1 minute', $3::timestamptz + (g + 1) * interval '1 minute', $5
		FROM generate_series(0, $4::int - 1) AS g`, grid.Name(), grid.Interval().String(), origin, n, status)
	if err != nil {
		return fmt.Errorf("load %d slots: %w", n, err)
	}
	return nil
}

// fresh empties the slot table and the history, loads the first n slots of
// grid with status (none for n = 0), vacuums and checkpoints: the state
// every measurement starts from.
func (s *schema) fresh(ctx context.Context, grid slot.Series, n int, status string) error {
	if _, err := s.exec(ctx, `TRUNCATE {{schema}}.slot, {{schema}}.slot_event`); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	if n > 0 {
		if err := s.load(ctx, grid, n, status); err != nil {
			return err
		}
	}
	return s.vacuum(ctx)
}

// vacuum vacuums and analyzes the slot table, then checkpoints.
func (s *schema) vacuum(ctx context.Context) error {
	if _, err := s.exec(ctx, `VACUUM ANALYZE {{schema}}.slot`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return s.e.checkpoint(ctx)
}

// at returns the start of slot k of every benchmark series.
func at(k int) time.Time { return origin.Add(time.Duration(k) * time.Minute) }
