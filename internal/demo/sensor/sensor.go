// Package sensor is the data of `almanac demo`: readings from sensors and
// a report per five-minute window counting them (examples/report tells the
// same story as a program of its own). It is the DTM story: "count
// the sensor records of each five-minute window that began six minutes
// ago", where every window must be reported exactly once and recomputed
// when late data arrives.
package sensor

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac"
)

// Setup creates the examples' tables in schema (next to almanac's, to keep
// the examples self-contained) and, once, fills sensor_reading with
// synthetic readings of the hours before now. Safe to run from several
// instances at once.
func Setup(ctx context.Context, pool *pgxpool.Pool, schema string, hours int, now time.Time) error {
	s := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('almanac example setup ' || $1))`, schema); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `
CREATE TABLE IF NOT EXISTS `+s+`.sensor_reading (
    at     timestamptz NOT NULL,
    sensor int         NOT NULL,
    value  float8      NOT NULL
);
CREATE INDEX IF NOT EXISTS sensor_reading_at ON `+s+`.sensor_reading (at);
CREATE TABLE IF NOT EXISTS `+s+`.sensor_report (
    slot         text        PRIMARY KEY, -- the slot text: 2026-03-01T10:00:00Z/PT5M
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    readings     int         NOT NULL,
    fence        bigint      NOT NULL,    -- the fencing token that wrote it
    computations int         NOT NULL DEFAULT 1
)`)
	if err != nil {
		return err
	}
	var have bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s+`.sensor_reading)`).Scan(&have); err != nil {
		return err
	}
	if !have {
		// A reading every few seconds from each of three sensors.
		var at []time.Time
		var sensors []int32
		var values []float64
		start := now.Add(-time.Duration(hours) * time.Hour)
		for t := start; t.Before(now); t = t.Add(time.Duration(5+rand.IntN(10)) * time.Second) {
			at = append(at, t)
			sensors = append(sensors, int32(rand.IntN(3)))
			values = append(values, rand.Float64()*100)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s+`.sensor_reading SELECT * FROM unnest($1::timestamptz[], $2::int[], $3::float8[])`,
			at, sensors, values); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// Report returns the handler that counts the readings of a slot's window
// and writes its report row in the slot's transaction: the row and the
// slot's COMPLETE commit together, so each window is reported exactly once
// per generation. A re-opened window is recomputed: the row is replaced and
// its computations counter grows.
func Report(schema string) almanac.Handler {
	s := pgx.Identifier{schema}.Sanitize()
	sql := `INSERT INTO ` + s + `.sensor_report (slot, window_start, window_end, readings, fence)
SELECT $1, $2, $3, count(*), $4 FROM ` + s + `.sensor_reading WHERE at >= $2 AND at < $3
ON CONFLICT (slot) DO UPDATE SET readings = EXCLUDED.readings, fence = EXCLUDED.fence,
    computations = sensor_report.computations + 1`
	return func(ctx context.Context, tx pgx.Tx, slot almanac.Slot) error {
		_, err := tx.Exec(ctx, sql, slot.String(), slot.Start, slot.End, slot.Fence)
		return err
	}
}

// Job is the report job: a PT5M series whose windows become due one minute
// after they end, covering the given hours before now.
func Job(series almanac.Series, schema string, hours int, now time.Time) almanac.Job {
	return almanac.Job{
		Series:  series,
		From:    now.Add(-time.Duration(hours) * time.Hour),
		Handler: Report(schema),
		Policy:  almanac.Policy{Lag: time.Minute},
	}
}
