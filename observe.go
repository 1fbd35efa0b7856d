package almanac

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/telemetry"
	"github.com/almanacdev/almanac/slot"
)

// What a Client tells operators besides its workers' events (package
// scheduler logs and measures those): coverage operations in the log and
// counters, the open-slot gauges, readiness, and the failures list.
// docs/operations.md describes them all.

// gaugeLimit bounds the open slots the almanac.slots.open gauge counts per
// series at each collection: a series with more reports this many, so that
// a scrape costs at most this many index entries per series.
const gaugeLimit = 100_000

// gaugeTimeout bounds one collection of the gauges.
const gaugeTimeout = 5 * time.Second

// readyTimeout bounds Ready's retries of transient faults when the caller's
// context carries no budget: a probe wants an answer, not a wait.
const readyTimeout = 2 * time.Second

// observeOpen registers the gauges of open slots and of the oldest open
// slot's age per series, read with one bounded statement per collection.
// Called by New when a MeterProvider is given.
func (c *Client) observeOpen() error {
	m := c.tel.Meter
	open, err := m.Int64ObservableGauge(telemetry.SlotsOpen, metric.WithUnit("{slot}"),
		metric.WithDescription(fmt.Sprintf("Slots not finished (AVAILABLE, including in backoff and parked, or ACQUIRED), per series; at most %d plus the held ones.", gaugeLimit)))
	if err != nil {
		return err
	}
	age, err := m.Float64ObservableGauge(telemetry.OldestOpenAge, metric.WithUnit("s"),
		metric.WithDescription("How long ago the oldest open slot of the series ended (database clock); 0 when none is open."))
	if err != nil {
		return err
	}
	paused, err := m.Int64ObservableGauge(telemetry.SeriesPaused, metric.WithUnit("{series}"),
		metric.WithDescription("1 while the series is paused (Client.Pause, almanac series pause), else 0; series list and status say by whom and why."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		defer cancel()
		defs, err := seriesdb.List(ctx, c.pool, c.opts.Schema)
		if err != nil {
			return fmt.Errorf("almanac: reading the series for the gauges: %w", err)
		}
		for _, d := range defs {
			var v int64
			if !d.PausedAt.IsZero() {
				v = 1
			}
			o.ObserveInt64(paused, v, metric.WithAttributeSet(attribute.NewSet(
				telemetry.AttrSeries.String(d.Grid.Name()), telemetry.AttrInterval.String(d.Grid.Interval().String()))))
		}
		rows, err := openSlots(ctx, c.pool, c.opts.Schema, gaugeLimit)
		if err != nil {
			return fmt.Errorf("almanac: reading the open slots for the gauges: %w", err)
		}
		for _, r := range rows {
			attrs := metric.WithAttributeSet(attribute.NewSet(telemetry.AttrSeries.String(r.Name), telemetry.AttrInterval.String(r.Interval)))
			o.ObserveInt64(open, r.Open, attrs)
			o.ObserveFloat64(age, r.OldestAge, attrs)
		}
		return nil
	}, open, age, paused)
	return err
}

// noteOp logs a coverage operation that changed slots (info, with who and
// why) and counts it. Operations inside a caller's transaction (inTx) are
// logged as such and not counted: the transaction may yet roll back.
func (c *Client) noteOp(ctx context.Context, op string, s Series, from, to time.Time, reason string, n int64, inTx bool) {
	if n == 0 {
		return
	}
	actor := c.opts.Actor
	if actor == "" {
		actor = "(database role)"
	}
	args := []any{"series", s.Name(), "interval", s.Interval().String(), "from", slot.FormatTime(from), "to", slot.FormatTime(to),
		"slots", n, "actor", actor}
	if reason != "" {
		args = append(args, "reason", reason)
	}
	if inTx {
		args = append(args, "in_transaction", true)
	}
	c.opts.Logger.InfoContext(ctx, "almanac: "+op, args...)
	if inTx {
		return
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(telemetry.AttrSeries.String(s.Name()), telemetry.AttrInterval.String(s.Interval().String())))
	switch op {
	case opReopened:
		c.tel.Reopened.Add(ctx, n, attrs)
	case opSkipped:
		c.tel.Skipped.Add(ctx, n, attrs)
	case opRetried:
		c.tel.Retried.Add(ctx, n, attrs)
	}
}

// Coverage operations in the log.
const (
	opReopened = "re-opened slots"
	opSkipped  = "skipped slots"
	opRetried  = "retried slots"
)

// ReadyOptions tune Ready.
type ReadyOptions struct {
	// Jobs requires at least one registered job (a worker process is not
	// ready without one; a process that only reads coverage is).
	Jobs bool
}

// Ready reports whether the client can do its work, for a readiness probe:
// nil when the database answers, the schema has every migration this code
// expects, and (with opts.Jobs) a job is registered. Otherwise an error
// wrapping ErrUnavailable, ErrNotMigrated or ErrNoJobs says what is wrong.
// Transient faults are retried for at most two seconds unless ctx carries a
// retry budget of its own.
func (c *Client) Ready(ctx context.Context, opts ReadyOptions) error {
	if !retry.HasBudget(ctx) {
		ctx = retry.WithBudget(ctx, readyTimeout)
	}
	if err := c.RequireMigrated(ctx); err != nil {
		return err
	}
	if opts.Jobs {
		c.mu.Lock()
		n := len(c.jobs)
		c.mu.Unlock()
		if n == 0 {
			return ErrNoJobs
		}
	}
	return nil
}

// seriesOpen is what is left to do in one series, for the gauges.
type seriesOpen struct {
	// Name and Interval identify the series.
	Name, Interval string
	// Open counts the AVAILABLE slots (due, in backoff, parked, or being
	// worked on in locked mode) and the ACQUIRED ones, at most the limit
	// given to openSlots plus the ACQUIRED ones.
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
const openSlotsSQL = `SELECT s.name, s."interval", a.n + h.n,
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

// openSlots returns the open slots of every series registered in schema,
// in one statement whose cost is bounded by limit rows per series (limit
// <= 0: no bound): cheap enough to run at every metrics scrape.
func openSlots(ctx context.Context, db *pgxpool.Pool, schema string, limit int64) ([]seriesOpen, error) {
	var bound *int64
	if limit > 0 {
		bound = &limit
	}
	var out []seriesOpen
	err := readOnly(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlschema.Render(openSlotsSQL, schema), bound)
		if err != nil {
			return err
		}
		var o seriesOpen
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
func readOnly(ctx context.Context, db *pgxpool.Pool, fn func(pgx.Tx) error) error {
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
