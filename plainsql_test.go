package almanac_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
)

// TestPlainSQLReopenWakesIdleWorker: a worker that is idle and listening is
// woken by a plain SQL UPDATE that re-opens a slot, as fast as by `almanac
// reopen`. The poll interval is an hour, so only the notification can wake
// it. Latency is measured on the database clock: from a timestamp taken in
// the UPDATE, before its commit, to the slot's new completed_at. The median
// of the samples must stay within 100 ms.
func TestPlainSQLReopenWakesIdleWorker(t *testing.T) {
	const samples = 15
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	app := "almanac-wake-test-" + hex.EncodeToString(b)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 6
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	client, err := almanac.New(pool, almanac.Options{Schema: db.Schema, Concurrency: 1, PollInterval: time.Hour})
	require.NoError(t, err)
	series, err := client.Series(ctx, "wake", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	done := make(chan time.Time, samples)
	require.NoError(t, client.Register(almanac.Job{Series: series, From: from, To: from.Add(samples * time.Minute),
		Handler: func(_ context.Context, _ pgx.Tx, s acquire.Slot) error {
			done <- s.Start
			return nil
		}}))
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(context.Background())) }()
	for range samples {
		<-done // the catch-up at start
	}

	// idle waits until the worker is listening, none of the client's
	// sessions is inside a transaction, and the last statement the worker
	// sent ended a search that found nothing (locked mode rolls back an
	// empty batch) or recorded the outcome of the job's last slot (after
	// which it does not look again): it waits for work. The scheduler's reading of the database clock, which
	// it does on its own schedule (at each minute, this series' next
	// trigger), is not the worker's.
	listen := "LISTEN " + pgx.Identifier{wake.Channel(db.Schema)}.Sanitize()
	idle := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			var listening, busy int
			var last string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE query = $2), count(*) FILTER (WHERE state <> 'idle'),
					coalesce((array_agg(lower(query) ORDER BY query_start DESC) FILTER (WHERE query NOT IN ($2, 'SELECT clock_timestamp()')))[1], '')
				FROM pg_stat_activity WHERE application_name = $1`, app, listen).Scan(&listening, &busy, &last))
			return listening == 1 && busy == 0 && (last == "rollback" || last == "commit")
		}, 30*time.Second, time.Millisecond)
	}
	reopen := sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late data'
		WHERE name = 'wake' AND "interval" = 'PT1M' AND slot_start = $1 RETURNING clock_timestamp()`, db.Schema)
	completed := sqlschema.Render(`SELECT completed_at, generation FROM {{schema}}.slot
		WHERE name = 'wake' AND "interval" = 'PT1M' AND slot_start = $1`, db.Schema)
	var latencies []time.Duration
	for i := range samples {
		start := from.Add(time.Duration(i) * time.Minute)
		idle()
		var updated time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, reopen, start).Scan(&updated))
		select {
		case got := <-done:
			require.True(t, got.Equal(start))
		case <-time.After(30 * time.Second):
			t.Fatalf("sample %d: the idle worker was not woken by the plain-SQL re-open", i)
		}
		idle()
		var at time.Time
		var generation int64
		require.NoError(t, db.Pool.QueryRow(ctx, completed, start).Scan(&at, &generation))
		require.Equal(t, int64(2), generation, "the plain-SQL re-open started a new computation")
		latencies = append(latencies, at.Sub(updated))
	}
	slices.Sort(latencies)
	median := latencies[len(latencies)/2]
	t.Logf("plain-SQL re-open to completion, database clock: median %v, min %v, max %v", median, latencies[0], latencies[len(latencies)-1])
	require.LessOrEqual(t, median, 100*time.Millisecond)

	// A slot inserted by plain SQL wakes it too.
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`DELETE FROM {{schema}}.slot WHERE slot_start = $1`, db.Schema), from)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
		VALUES ('wake', 'PT1M', $1, $2)`, db.Schema), from, from.Add(time.Minute))
	require.NoError(t, err)
	select {
	case got := <-done:
		require.True(t, got.Equal(from))
	case <-time.After(30 * time.Second):
		t.Fatal("the idle worker was not woken by the plain-SQL insert")
	}
}

// TestClientHistory: the root client shows a slot's history and prunes it.
func TestClientHistory(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	client, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	series, err := client.Series(ctx, "hist", "P1D", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	day := time.Date(2026, 3, 29, 0, 0, 0, 0, series.Location())
	_, err = client.Skip(ctx, series, day, day.AddDate(0, 0, 1), almanac.WriteOptions{Reason: "holiday"})
	require.NoError(t, err)
	h, err := client.History(ctx, series, day.Add(20*time.Hour))
	require.NoError(t, err)
	require.Equal(t, "2026-03-29T00:00:00+01:00/P1D", h.Slot.String())
	require.Len(t, h.Events, 1)
	require.Equal(t, "holiday", h.Events[0].Message)
	n, err := client.PruneHistory(ctx, almanac.WriteOptions{})
	require.NoError(t, err)
	require.Zero(t, n, "nothing is past the retention")
}
