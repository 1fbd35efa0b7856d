package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
)

// origin is where every benchmark series starts: slot k of a series is the
// minute origin + k, all of them due long ago.
var origin = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// minute is the interval of every benchmark series.
var minute = func() slot.Interval {
	iv, err := slot.ParseInterval("PT1M")
	if err != nil {
		panic(err)
	}
	return iv
}()

// schema is a migrated schema of one scenario, dropped when it is done.
type schema struct {
	e    *env
	name string
}

// newSchema creates and migrates a schema named almanac_bench_<tag>_<random>
// through almanac's public Client.
func (e *env) newSchema(ctx context.Context, tag string) (*schema, error) {
	name, err := e.createSchema(ctx, tag)
	if err != nil {
		return nil, err
	}
	s := &schema{e: e, name: name}
	c, err := almanac.New(e.admin, almanac.Options{Schema: name})
	if err == nil {
		_, err = c.Migrate(ctx)
	}
	if err != nil {
		s.drop()
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return s, nil
}

// createSchema creates an empty schema named almanac_bench_<tag>_<random>.
func (e *env) createSchema(ctx context.Context, tag string) (string, error) {
	name := randomName("almanac_bench_" + tag)
	if _, err := e.admin.Exec(ctx, "CREATE SCHEMA "+quote(name)); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	return name, nil
}

// randomName returns prefix_<8 hex digits>.
func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails
	return prefix + "_" + hex.EncodeToString(b)
}

// quote quotes an SQL identifier.
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// render puts the quoted schema where sql says {{schema}}.
func render(sql, schema string) string { return strings.ReplaceAll(sql, "{{schema}}", quote(schema)) }

// dropSchema drops a schema and everything in it, even when ctx is done.
func (e *env) dropSchema(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = e.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+quote(name)+" CASCADE")
}

func (s *schema) drop() { s.e.dropSchema(s.name) }

// series registers a PT1M UTC series from origin.
func (s *schema) series(ctx context.Context, name string) (slot.Series, error) {
	grid, err := slot.NewSeries(name, minute, time.UTC, time.Time{})
	if err != nil {
		return slot.Series{}, err
	}
	c, err := almanac.New(s.e.admin, almanac.Options{Schema: s.name})
	if err == nil {
		_, _, err = c.AddSeries(ctx, grid)
	}
	if err != nil {
		return slot.Series{}, fmt.Errorf("register %s: %w", name, err)
	}
	return grid, nil
}

// newBenchSeries creates a scenario's schema, as newSchema, with its PT1M
// series "bench" registered; drop the schema when done.
func (e *env) newBenchSeries(ctx context.Context, tag string) (*schema, slot.Series, error) {
	s, err := e.newSchema(ctx, tag)
	if err != nil {
		return nil, slot.Series{}, err
	}
	grid, err := s.series(ctx, "bench")
	if err != nil {
		s.drop()
		return nil, slot.Series{}, err
	}
	return s, grid, nil
}

// exec runs sql, with {{schema}} standing for the schema, and returns the
// number of rows it affected.
func (s *schema) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := s.e.admin.Exec(ctx, render(sql, s.name), args...)
	return tag.RowsAffected(), err
}

// count runs a query returning one number.
func (s *schema) count(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := s.e.admin.QueryRow(ctx, render(sql, s.name), args...).Scan(&n)
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

// index returns k for the start of slot k of every benchmark series.
func index(start time.Time) int { return int(start.Sub(origin) / time.Minute) }
