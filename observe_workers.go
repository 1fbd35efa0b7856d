package almanac

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/redact"
	"github.com/almanacdev/almanac/internal/telemetry"
)

// What the scheduler tells operators: the log events (docs/operations.md
// lists them), the metrics and a span per handler run. Per-slot events are
// built only when the logger is enabled for their level, so a worker
// logging at info pays nothing for its debug lines.

// logStarted logs that the workers of every job are starting, with the
// owner their leases carry.
func (e *engine) logStarted(ctx context.Context) {
	for _, j := range e.jobs {
		e.opts.Logger.InfoContext(ctx, "almanac: worker started", j.logArgs("owner", j.owner, "mode", j.mode.String(),
			"concurrency", j.limit)...)
	}
}

// logStopped logs that the workers of every job have stopped.
func (e *engine) logStopped(ctx context.Context) {
	for _, j := range e.jobs {
		e.opts.Logger.InfoContext(ctx, "almanac: worker stopped", j.logArgs("owner", j.owner)...)
	}
}

// slotArgs are the attributes of one acquisition in the log.
func (j *job) slotArgs(sl acquire.Slot, extra ...any) []any {
	return j.logArgs(append([]any{"slot", sl.Slot.String(), "owner", j.owner, "attempt", sl.Attempt,
		"generation", sl.Generation, "fence", sl.Fence}, extra...)...)
}

// claimed is called as a handler is about to start on sl: it records the
// claim latency (for the first slot of a unit of work, from claimStart) and
// the lateness, logs the claim (debug) or the takeover (warn), and starts
// the slot's span, whose context the handler gets (none without a
// TracerProvider).
func (e *engine) claimed(ctx context.Context, j *job, sl acquire.Slot, claimStart time.Time, first bool) (context.Context, trace.Span) {
	now := time.Now()
	if first {
		e.tel.ClaimDuration.Record(ctx, now.Sub(claimStart).Seconds(), j.record...)
	}
	e.tel.Lateness.Record(ctx, max(0, now.Sub(sl.End.Add(j.Lag)).Seconds()), j.record...)
	if sl.TookOver {
		e.opts.Logger.WarnContext(ctx, "almanac: took over a slot whose lease expired or was ejected", j.slotArgs(sl)...)
	} else if e.opts.Logger.Enabled(ctx, slog.LevelDebug) {
		e.opts.Logger.DebugContext(ctx, "almanac: claimed", j.slotArgs(sl)...)
	}
	if !e.tel.Tracing {
		return ctx, nil
	}
	ctx, span := e.tel.Tracer.Start(ctx, j.spanName, consumer...)
	if span.IsRecording() {
		// Built only for a span that is kept: a no-op tracer costs nothing.
		span.SetAttributes(telemetry.AttrSeries.String(j.Series.Name()), telemetry.AttrInterval.String(j.intervalText),
			telemetry.AttrSlot.String(sl.Slot.String()), telemetry.AttrFence.Int64(sl.Fence),
			telemetry.AttrAttempt.Int(sl.Attempt), telemetry.AttrGen.Int64(sl.Generation))
	}
	return ctx, span
}

// consumer is the kind of a slot's span: it processes work it was handed.
var consumer = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// endSpan ends a slot's span with the handler's error; a skip or a snooze
// is not one.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && span.IsRecording() && !isSkipOrSnooze(err) {
		// Spans leave the process too: the error's text is redacted.
		msg := redact.String(err.Error())
		span.RecordError(errors.New(msg))
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

func isSkipOrSnooze(err error) bool {
	var skip *acquire.SkipError
	var snooze *acquire.SnoozeError
	return errors.As(err, &skip) || errors.As(err, &snooze)
}

// lockedHandler returns j's handler for one unit of locked-mode work that
// started looking for slots at claimStart.
func (e *engine) lockedHandler(j *job, claimStart time.Time) acquire.Handler {
	var started atomic.Bool
	return func(ctx context.Context, tx pgx.Tx, sl acquire.Slot) error {
		ctx, span := e.claimed(ctx, j, sl, claimStart, !started.Swap(true))
		err := j.Handler(ctx, tx, sl)
		endSpan(span, err)
		return err
	}
}

// record counts one slot outcome and logs it: completions and snoozes at
// debug, failures and parkings at warn, the rest at info.
func (e *engine) record(j *job, res acquire.Result) {
	ctx := context.Background()
	level := slog.LevelInfo
	switch res.Outcome {
	case acquire.Completed:
		e.tel.Completed.Add(ctx, 1, j.add...)
		e.tel.HandlerDuration.Record(ctx, res.Duration.Seconds(), j.record...)
		level = slog.LevelDebug
	case acquire.Snoozed:
		e.tel.HandlerDuration.Record(ctx, res.Duration.Seconds(), j.record...)
		level = slog.LevelDebug
	case acquire.Skipped:
		e.tel.Skipped.Add(ctx, 1, j.add...)
		e.tel.HandlerDuration.Record(ctx, res.Duration.Seconds(), j.record...)
	case acquire.Failed:
		e.tel.Failed.Add(ctx, 1, j.add...)
		e.tel.HandlerDuration.Record(ctx, res.Duration.Seconds(), j.record...)
		level = slog.LevelWarn
	case acquire.Parked:
		// A parking is the last failure: both are counted.
		e.tel.Failed.Add(ctx, 1, j.add...)
		e.tel.Parked.Add(ctx, 1, j.add...)
		e.tel.HandlerDuration.Record(ctx, res.Duration.Seconds(), j.record...)
		level = slog.LevelWarn
	}
	if !e.opts.Logger.Enabled(ctx, level) {
		return
	}
	args := j.slotArgs(res.Slot, "duration", res.Duration.Round(time.Microsecond), "outcome", string(res.Outcome))
	if res.Err != nil && res.Outcome != acquire.Completed {
		args = append(args, "error", res.Err.Error())
	}
	if res.Outcome == acquire.Failed || res.Outcome == acquire.Parked {
		args = append(args, "retry_in", res.Delay)
	}
	msg := "almanac: slot " + outcomeWords[res.Outcome]
	e.opts.Logger.Log(ctx, level, msg, args...)
}

// outcomeWords name outcomes in log messages.
var outcomeWords = map[acquire.Outcome]string{
	acquire.Completed: "completed", acquire.Skipped: "skipped", acquire.Snoozed: "snoozed",
	acquire.Failed: "failed", acquire.Parked: "parked", acquire.Abandoned: "abandoned",
}

// observeWorkers registers the gauge of busy workers per job, read from the
// dispatcher's counts at each collection, and returns its unregistration.
func (e *engine) observeWorkers() (stop func()) {
	g, err := e.tel.Meter.Int64ObservableGauge(telemetry.WorkersBusy, metric.WithUnit("{worker}"),
		metric.WithDescription("Workers running a handler or looking for a slot, per series."))
	if err != nil {
		return func() {}
	}
	reg, err := e.tel.Meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, j := range e.jobs {
			o.ObserveInt64(g, int64(j.running), metric.WithAttributeSet(j.attrSet))
		}
		return nil
	}, g)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// seriesAttrs sets the job's metric attributes and owner text, once.
func (j *job) seriesAttrs(owner string) {
	j.intervalText = j.Series.Interval().String()
	j.attrSet = attribute.NewSet(telemetry.AttrSeries.String(j.Series.Name()), telemetry.AttrInterval.String(j.intervalText))
	attrs := metric.WithAttributeSet(j.attrSet)
	j.add, j.record = []metric.AddOption{attrs}, []metric.RecordOption{attrs}
	j.owner = owner
	j.spanName = "almanac.slot " + j.Series.Name()
}
