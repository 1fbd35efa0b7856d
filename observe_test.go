package almanac_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// records is a slog.Handler that keeps every record, and also writes it as
// text, to check that no line holds a secret.
type records struct {
	mu   sync.Mutex
	list []slog.Record
	text bytes.Buffer
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(ctx context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec.Clone())
	return slog.NewTextHandler(&r.text, &slog.HandlerOptions{Level: slog.LevelDebug}).Handle(ctx, rec)
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// find returns the attributes of the records with message msg at level.
func (r *records) find(msg string, level slog.Level) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.list {
		if rec.Message != msg || rec.Level != level {
			continue
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// secret is a password that a handler's error quotes in a connection URL.
const secret = "s3cr3t-pw-4711"

// TestObservability runs a job whose slots complete, fail for good
// (parked), and skip, then re-opens and retries some: the log has each
// event at its level with the slot's attributes, no line holds the password
// an error quoted, the counters and gauges agree with the database, and each
// handler run has a span.
func TestObservability(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	logs := &records{}
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Logger: slog.New(logs), Actor: "oncall@host", Concurrency: 1,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	require.NoError(t, err)
	series, err := c.Series(ctx, "observed", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slot := func(i int) time.Time { return from.Add(time.Duration(i) * time.Minute) }
	busy := int64(-1)
	require.NoError(t, c.Register(almanac.Job{Series: series, From: from, To: slot(6),
		Handler: func(_ context.Context, _ pgx.Tx, s almanac.Slot) error {
			switch {
			case s.Start.Before(slot(2)):
				return errors.New("cannot reach postgres://app:" + secret + "@db.internal/prod")
			case s.Start.Equal(slot(2)):
				return almanac.Skip("holiday")
			case s.Start.Equal(slot(3)):
				busy = workersBusy(t, reader)
			}
			return nil
		},
		Policy: almanac.Policy{MaxAttempts: 1},
	}))
	_, err = c.Drain(ctx)
	require.ErrorIs(t, err, almanac.ErrIncomplete, "two slots are parked")

	reopened, err := c.Reopen(ctx, series, slot(3), slot(6), almanac.WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	require.EqualValues(t, 3, reopened.Changed)
	retried, err := c.Retry(ctx, series, slot(0), slot(1), almanac.WriteOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, retried.Changed)

	// Logs.
	require.NotContains(t, logs.text.String(), secret)
	started := logs.find("almanac: worker started", slog.LevelInfo)
	require.Len(t, started, 1)
	require.Equal(t, "observed", started[0]["series"])
	require.Len(t, started[0]["owner"], 36, "a UUID")
	require.Len(t, logs.find("almanac: worker stopped", slog.LevelInfo), 1)
	claims := logs.find("almanac: claimed", slog.LevelDebug)
	require.Len(t, claims, 6)
	for _, a := range claims {
		for _, k := range []string{"series", "interval", "slot", "owner", "attempt", "generation", "fence"} {
			require.NotEmpty(t, a[k], "claim attribute %s", k)
		}
		require.Equal(t, "1", a["attempt"])
		require.Equal(t, "1", a["generation"])
	}
	require.Len(t, logs.find("almanac: slot completed", slog.LevelDebug), 3)
	require.Len(t, logs.find("almanac: slot skipped", slog.LevelInfo), 1)
	parked := logs.find("almanac: slot parked", slog.LevelWarn)
	require.Len(t, parked, 2)
	require.Contains(t, parked[0]["error"], "postgres://app:REDACTED@db.internal/prod")
	require.NotEmpty(t, parked[0]["fence"])
	ops := logs.find("almanac: re-opened slots", slog.LevelInfo)
	require.Len(t, ops, 1)
	require.Equal(t, "oncall@host", ops[0]["actor"])
	require.Equal(t, "late data", ops[0]["reason"])
	require.Equal(t, "3", ops[0]["slots"])
	require.Len(t, logs.find("almanac: retried slots", slog.LevelInfo), 1)

	// Metrics, against the database.
	status, err := c.Status(ctx, series, from, slot(6))
	require.NoError(t, err)
	require.EqualValues(t, 1, status.Parked)
	require.EqualValues(t, 4, status.Available, "three re-opened, one retried")
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]float64{}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					requireSeriesOnly(t, m.Name, p.Attributes.Len())
					got[m.Name] += float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					requireSeriesOnly(t, m.Name, p.Attributes.Len())
					got[m.Name] += float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					requireSeriesOnly(t, m.Name, p.Attributes.Len())
					got[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					requireSeriesOnly(t, m.Name, p.Attributes.Len())
					counts[m.Name] += p.Count
				}
			}
		}
	}
	require.EqualValues(t, 3, got["almanac.slots.completed"])
	require.EqualValues(t, 2, got["almanac.slots.failed"])
	require.EqualValues(t, 2, got["almanac.slots.parked"])
	require.EqualValues(t, 1, got["almanac.slots.skipped"])
	require.EqualValues(t, 3, got["almanac.slots.reopened"])
	require.EqualValues(t, 1, got["almanac.slots.retried"])
	require.EqualValues(t, status.Available+status.Parked, got["almanac.slots.open"])
	// The oldest open slot ended on 2026-01-01, long before now.
	require.Greater(t, got["almanac.slots.oldest_open.age"], float64(24*3600))
	require.EqualValues(t, 6, counts["almanac.handler.duration"])
	require.EqualValues(t, 6, counts["almanac.slot.lateness"])
	require.NotZero(t, counts["almanac.claim.duration"])
	require.EqualValues(t, 1, busy, "the gauge of busy workers, read while a handler ran")

	// A span per handler run; the failures carry their (redacted) error.
	ended := spans.Ended()
	require.Len(t, ended, 6)
	failed := 0
	for _, s := range ended {
		if s.Status().Code.String() == "Error" {
			failed++
			require.NotContains(t, s.Status().Description, secret)
			for _, e := range s.Events() {
				for _, a := range e.Attributes {
					require.NotContains(t, a.Value.String(), secret)
				}
			}
		}
	}
	require.Equal(t, 2, failed)
}

// workersBusy collects the gauge of busy workers.
func workersBusy(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "almanac.workers.busy" {
				return g.DataPoints[0].Value
			}
		}
	}
	return 0
}

// requireSeriesOnly checks a measurement carries the series' two labels and
// nothing else: no slot, no fence, nothing whose cardinality grows.
func requireSeriesOnly(t *testing.T, name string, n int) {
	t.Helper()
	require.Equal(t, 2, n, "%s: attributes beyond the series'", name)
}

// TestReady: ready on a migrated schema (and with a job when asked for
// one), not ready with a sentinel error otherwise.
func TestReady(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	require.NoError(t, c.Ready(ctx, almanac.ReadyOptions{}))
	require.ErrorIs(t, c.Ready(ctx, almanac.ReadyOptions{Jobs: true}), almanac.ErrNoJobs)

	bare, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema + "_none"})
	require.NoError(t, err)
	err = bare.Ready(ctx, almanac.ReadyOptions{})
	require.ErrorIs(t, err, almanac.ErrNotMigrated)
	require.True(t, strings.Contains(err.Error(), "migrate"), err.Error())
}
