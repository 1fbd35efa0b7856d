package almanac

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/telemetry"
	"github.com/almanacdev/almanac/slot"
)

// What a Client tells operators besides its workers' events (package
// scheduler logs and measures those): coverage operations in the log and
// counters, the open-slot gauges, readiness, and the failures list.
// docs/operations.md describes them all.

// GaugeLimit bounds the open slots the almanac.slots.open gauge counts per
// series at each collection: a series with more reports this many, so that
// a scrape costs at most this many index entries per series.
const GaugeLimit = 100_000

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
		metric.WithDescription(fmt.Sprintf("Slots not finished (AVAILABLE, including in backoff and parked, or ACQUIRED), per series; at most %d plus the held ones.", GaugeLimit)))
	if err != nil {
		return err
	}
	age, err := m.Float64ObservableGauge(telemetry.OldestOpenAge, metric.WithUnit("s"),
		metric.WithDescription("How long ago the oldest open slot of the series ended (database clock); 0 when none is open."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		defer cancel()
		rows, err := coverage.Open(ctx, c.pool, c.opts.Schema, GaugeLimit)
		if err != nil {
			return fmt.Errorf("almanac: reading the open slots for the gauges: %w", err)
		}
		for _, r := range rows {
			attrs := metric.WithAttributeSet(attribute.NewSet(telemetry.AttrSeries.String(r.Name), telemetry.AttrInterval.String(r.Interval)))
			o.ObserveInt64(open, r.Open, attrs)
			o.ObserveFloat64(age, r.OldestAge, attrs)
		}
		return nil
	}, open, age)
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

// FailuresOptions select the slots Failures lists.
type FailuresOptions = coverage.FailuresQuery

// Failure is a failed or parked slot, as Failures lists it.
type Failure = coverage.Failure

// DefaultFailuresLimit is the default of FailuresOptions.Limit.
const DefaultFailuresLimit = coverage.DefaultFailuresLimit

// Failures lists the slots whose last run failed, waiting for a retry or
// parked, of every series (or of opts.Name's), in order of series and slot:
// at most opts.Limit of them, with whether more matched. The work grows with
// the open slots in range, not with the finished ones. Slots being worked on
// are left out. Errors for an empty range wrap ErrInvalid.
func (c *Client) Failures(ctx context.Context, opts FailuresOptions) ([]Failure, bool, error) {
	if opts.Name != "" {
		if err := input.CheckName(opts.Name); err != nil {
			return nil, false, err
		}
	}
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, false, err
	}
	var out []Failure
	var more bool
	err := retry.Do(ctx, func(ctx context.Context) error {
		var err error
		out, more, err = coverage.Failures(ctx, c.pool, c.opts.Schema, opts)
		return err
	})
	return out, more, err
}
