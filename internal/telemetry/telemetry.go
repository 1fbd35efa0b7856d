// Package telemetry holds almanac's OpenTelemetry instruments: created once
// per provider, shared by the scheduler (slot outcomes, durations) and the
// root package (coverage operations, gauges). Without providers every
// instrument is a no-op. docs/operations.md lists the names.
package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of almanac's meter and tracer.
const Scope = "github.com/almanacdev/almanac"

// Attribute keys. A series is a label; a slot never is (its cardinality
// grows with time), except on spans.
const (
	AttrSeries   = attribute.Key("almanac.series")
	AttrInterval = attribute.Key("almanac.series.interval")
	AttrSlot     = attribute.Key("almanac.slot")
	AttrFence    = attribute.Key("almanac.fence")
	AttrAttempt  = attribute.Key("almanac.attempt")
	AttrGen      = attribute.Key("almanac.generation")
	AttrOutcome  = attribute.Key("almanac.outcome")
)

// Metric names, following the OpenTelemetry conventions: dotted
// namespaces, counters in the plural without a _total suffix (a Prometheus
// exporter adds it), durations in seconds.
const (
	SlotsCompleted  = "almanac.slots.completed"
	SlotsFailed     = "almanac.slots.failed"
	SlotsParked     = "almanac.slots.parked"
	SlotsSkipped    = "almanac.slots.skipped"
	SlotsReopened   = "almanac.slots.reopened"
	SlotsRetried    = "almanac.slots.retried"
	HandlerDuration = "almanac.handler.duration"
	ClaimDuration   = "almanac.claim.duration"
	Lateness        = "almanac.slot.lateness"
	SlotsOpen       = "almanac.slots.open"
	OldestOpenAge   = "almanac.slots.oldest_open.age"
	WorkersBusy     = "almanac.workers.busy"
	SeriesPaused    = "almanac.series.paused"
)

// Instruments are the synchronous instruments and the tracer. Create them
// once (New) and share them: creating one per slot would cost more than
// recording.
type Instruments struct {
	Meter  metric.Meter
	Tracer trace.Tracer
	// Tracing is set when a TracerProvider was given: without one no span
	// is started at all, not even a no-op one.
	Tracing bool

	Completed, Failed, Parked, Skipped, Reopened, Retried metric.Int64Counter
	// HandlerDuration is the handler's running time; ClaimDuration the time
	// from a worker looking for work to its first handler starting (the
	// acquisition statement and any wait for a connection); Lateness the
	// time from a slot being due (its end plus the job's lag) to its
	// handler starting, on the worker's clock. All in seconds.
	HandlerDuration, ClaimDuration, Lateness metric.Float64Histogram
}

// Bucket bounds, in seconds: handlers and claims from a millisecond to an
// hour; lateness from a second to a month (a backfill is months late).
var (
	durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	latenessBuckets = []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400, 30 * 86400}
)

// New creates the instruments of mp and tp; nil means no-op. An instrument
// the provider refuses (it cannot, for these fixed, valid names) is a
// no-op.
func New(mp metric.MeterProvider, tp trace.TracerProvider) *Instruments {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	tracing := tp != nil
	if !tracing {
		tp = tracenoop.NewTracerProvider()
	}
	m := mp.Meter(Scope)
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit("{slot}"), metric.WithDescription(desc))
		if err != nil {
			return noop.Int64Counter{}
		}
		return c
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		if err != nil {
			return noop.Float64Histogram{}
		}
		return h
	}
	return &Instruments{
		Meter:           m,
		Tracer:          tp.Tracer(Scope),
		Tracing:         tracing,
		Completed:       counter(SlotsCompleted, "Slots completed by a handler."),
		Failed:          counter(SlotsFailed, "Handler failures recorded (the slot is retried after a backoff)."),
		Parked:          counter(SlotsParked, "Slots parked: they failed for the last allowed time and wait for a retry by an operator."),
		Skipped:         counter(SlotsSkipped, "Slots marked SKIP, by a handler or an operator."),
		Reopened:        counter(SlotsReopened, "Finished slots re-opened for recomputation by an operator."),
		Retried:         counter(SlotsRetried, "Failed or parked slots made acquirable now by an operator."),
		HandlerDuration: histogram(HandlerDuration, "Running time of a slot's handler.", durationBuckets),
		ClaimDuration:   histogram(ClaimDuration, "Time from a worker looking for work to its handler starting.", durationBuckets),
		Lateness:        histogram(Lateness, "Time from a slot being due to its handler starting, on the worker's clock.", latenessBuckets),
	}
}
