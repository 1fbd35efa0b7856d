package coverage

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// OpenSlots is what is left to do in one series, for gauges.
type OpenSlots struct {
	// Name and Interval identify the series.
	Name, Interval string
	// Open counts the AVAILABLE slots (due, in backoff, parked, or being
	// worked on in locked mode) and the ACQUIRED ones, at most the limit
	// given to Open plus the ACQUIRED ones.
	Open int64
	// OldestAge is how long ago the oldest open slot ended, in seconds of
	// the database clock; 0 when none is open (or the oldest has not ended:
	// a job with a negative lag).
	OldestAge float64
}

// openSlots reads, per registered series, each part from an index: the
// AVAILABLE slots from the partial index on them (counted up to $1, so a
// series with millions left costs a bounded scan), the oldest of them as
// the first entry of that index (in its order, NULLS FIRST, which the
// primary key cannot give: see migration 5), and the ACQUIRED ones (as
// many as there are workers) from theirs.
const openSlots = `SELECT s.name, s."interval", a.n + h.n,
    coalesce(extract(epoch FROM greatest(clock_timestamp() - least(o.slot_end, h.oldest), interval '0')), 0)::float8
FROM {{schema}}.series s
CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM {{schema}}.slot x
    WHERE x.name = s.name AND x."interval" = s."interval" AND x.status = 'AVAILABLE' LIMIT $1) l) a
LEFT JOIN LATERAL (SELECT x.slot_end FROM {{schema}}.slot x
    WHERE x.name = s.name AND x."interval" = s."interval" AND x.status = 'AVAILABLE'
    ORDER BY x.slot_start NULLS FIRST LIMIT 1) o ON true
CROSS JOIN LATERAL (SELECT count(*) AS n, min(x.slot_end) AS oldest FROM {{schema}}.slot x
    WHERE x.name = s.name AND x."interval" = s."interval" AND x.status = 'ACQUIRED') h
ORDER BY s.name, s."interval"`

// Open returns the open slots of every series registered in schema, in one
// statement whose cost is bounded by limit rows per series (limit <= 0: no
// bound): cheap enough to run at every metrics scrape.
func Open(ctx context.Context, db DB, schema string, limit int64) ([]OpenSlots, error) {
	if schema == "" {
		schema = sqlschema.Default
	}
	if err := sqlschema.Check(schema); err != nil {
		return nil, err
	}
	var bound *int64
	if limit > 0 {
		bound = &limit
	}
	var out []OpenSlots
	err := readOnly(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlschema.Render(openSlots, schema), bound)
		if err != nil {
			return err
		}
		var o OpenSlots
		_, err = pgx.ForEachRow(rows, []any{&o.Name, &o.Interval, &o.Open, &o.OldestAge}, func() error {
			out = append(out, o)
			return nil
		})
		return err
	})
	return out, err
}

// readOnly runs fn in a read-only transaction without JIT compilation,
// and rolls it back. The planner over-estimates the rows behind a LIMIT
// given as a parameter: with JIT on, the open-slot statement spent 100 to
// 500 ms compiling what then ran in 1.2 ms (one series of 1M slots, 10,080
// of them open).
func readOnly(ctx context.Context, db DB, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return err
	}
	return fn(tx)
}
