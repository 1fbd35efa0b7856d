package almanac_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestPauseAndResume: a paused series is stored with who paused it and
// why; a drain runs none of its slots and reports them not run, instead of
// waiting for them; after a resume the same drain runs them all. Both
// changes are in the series' history.
func TestPauseAndResume(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	reader := sdkmetric.NewManualReader()
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, Actor: "ops@example", PollInterval: 100 * time.Millisecond,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	series, err := c.Series(ctx, "paused", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ran atomic.Int64
	require.NoError(t, c.Register(almanac.Job{Series: series, From: from, To: from.Add(5 * time.Minute),
		Handler: func(context.Context, pgx.Tx, almanac.Slot) error { ran.Add(1); return nil }}))

	info, err := c.Pause(ctx, series, "upstream down")
	require.NoError(t, err)
	require.False(t, info.PausedAt.IsZero())
	require.Equal(t, "ops@example", info.PausedBy)
	require.Equal(t, "upstream down", info.PausedReason)
	require.Equal(t, int64(1), pausedGauge(t, reader), "the paused gauge")
	again, err := c.Pause(ctx, series, "still down")
	require.NoError(t, err)
	require.True(t, again.PausedAt.Equal(info.PausedAt), "pausing again keeps when it was first paused")

	_, err = c.Drain(ctx)
	var incomplete *almanac.IncompleteError
	require.ErrorAs(t, err, &incomplete)
	require.Equal(t, int64(5), incomplete.Ready)
	require.Zero(t, ran.Load(), "no slot of a paused series runs")

	info, err = c.Resume(ctx, series, "upstream back")
	require.NoError(t, err)
	require.True(t, info.PausedAt.IsZero())
	require.Empty(t, info.PausedBy)
	require.Equal(t, int64(0), pausedGauge(t, reader))
	_, err = c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), ran.Load())

	var events []string
	rows, err := db.Pool.Query(ctx, sqlschema.Render(`SELECT event || ' by ' || actor || ': ' || message FROM {{schema}}.series_event ORDER BY at`, db.Schema))
	require.NoError(t, err)
	events, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"paused by ops@example: upstream down", "paused by ops@example: still down", "resumed by ops@example: upstream back"}, events)

	_, err = c.Pause(ctx, series, "bad\x00reason")
	require.ErrorIs(t, err, almanac.ErrInvalid)
}

// pausedGauge collects almanac.series.paused of the one series.
func pausedGauge(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "almanac.series.paused" {
				require.Len(t, g.DataPoints, 1)
				return g.DataPoints[0].Value
			}
		}
	}
	t.Fatal("no almanac.series.paused gauge")
	return 0
}
