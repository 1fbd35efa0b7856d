package almanac_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestClientLifecycle: a Client behaves like a well-behaved service object:
// jobs are checked when registered, Start and Stop may be repeated in turn,
// misuse is a sentinel error, and Drain does not compete with started jobs.
func TestClientLifecycle(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	series, err := c.Series(ctx, "life", "PT1M", almanac.SeriesOptions{})
	require.NoError(t, err)

	require.ErrorIs(t, c.Start(ctx), almanac.ErrNoJobs)
	_, err = c.Drain(ctx)
	require.ErrorIs(t, err, almanac.ErrNoJobs)
	require.ErrorIs(t, c.Stop(ctx), almanac.ErrNotStarted)

	// Checked at Register, not at Start.
	require.ErrorIs(t, c.Register(almanac.Job{Series: series}), almanac.ErrInvalid, "no handler")
	require.ErrorIs(t, c.Register(almanac.Job{Series: series,
		Handler:      func(context.Context, pgx.Tx, almanac.Slot) error { return nil },
		LeaseHandler: func(context.Context, *almanac.Lease) error { return nil }}), almanac.ErrInvalid, "a handler for each mode")
	require.ErrorIs(t, c.Register(almanac.Job{Series: series, Schedule: "0 0 30 2 *",
		Handler: func(context.Context, pgx.Tx, almanac.Slot) error { return nil }}), almanac.ErrInvalid, "a schedule that never fires")

	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ran := make(chan time.Time, 10)
	job := almanac.Job{Series: series, From: from, To: from.Add(2 * time.Minute),
		Handler: func(_ context.Context, _ pgx.Tx, s almanac.Slot) error { ran <- s.Start; return nil }}
	require.NoError(t, c.Register(job))
	require.ErrorIs(t, c.Register(job), almanac.ErrInvalid, "two jobs for one series")

	for round := range 2 {
		require.NoError(t, c.Start(ctx), "round %d", round)
		require.ErrorIs(t, c.Start(ctx), almanac.ErrStarted)
		other, err := c.Series(ctx, "other", "PT1M", almanac.SeriesOptions{})
		require.NoError(t, err)
		require.ErrorIs(t, c.Register(almanac.Job{Series: other, Handler: job.Handler}), almanac.ErrStarted)
		_, err = c.Drain(ctx)
		require.ErrorIs(t, err, almanac.ErrStarted)
		if round == 0 {
			<-ran
			<-ran
		}
		require.NoError(t, c.Stop(ctx), "round %d", round)
		require.ErrorIs(t, c.Stop(ctx), almanac.ErrNotStarted)
	}
	summary, err := c.Drain(ctx)
	require.NoError(t, err, "every slot is complete")
	require.Empty(t, summary)
}

// TestReopenTx: "insert the late data and re-open its window" is one
// atomic change with ReopenTx: rolled back, neither happened; committed,
// both did, and the idle worker is woken by the commit.
func TestReopenTx(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(ctx, sqlschema.Render(`CREATE TABLE {{schema}}.reading (at timestamptz, value int)`, db.Schema))
	require.NoError(t, err)
	c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, PollInterval: time.Hour})
	require.NoError(t, err)
	series, err := c.Series(ctx, "hourly", "PT1H", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	runs := make(chan almanac.Slot, 10)
	require.NoError(t, c.Register(almanac.Job{Series: series, From: from, To: from.Add(3 * time.Hour),
		Handler: func(_ context.Context, _ pgx.Tx, s almanac.Slot) error { runs <- s; return nil }}))
	_, err = c.Drain(ctx)
	require.NoError(t, err)
	for range 3 {
		<-runs
	}
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()

	lateData := func(commit bool) almanac.WriteResult {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.reading VALUES ('2026-01-01T01:30:00Z', 7)`, db.Schema))
		require.NoError(t, err)
		res, err := c.ReopenTx(ctx, tx, series, from.Add(time.Hour), from.Add(2*time.Hour), almanac.WriteOptions{Reason: "late reading"})
		require.NoError(t, err)
		// The caller's transaction keeps its own settings.
		var engine string
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(current_setting('almanac.engine', true), '')`).Scan(&engine))
		require.NotEqual(t, "on", engine)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		}
		return res
	}
	status := func() string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT status FROM {{schema}}.slot WHERE slot_start = $1`, db.Schema),
			from.Add(time.Hour)).Scan(&s))
		return s
	}

	require.EqualValues(t, 1, lateData(false).Changed)
	require.Equal(t, "COMPLETE", status(), "rolled back: not re-opened")
	var readings int
	require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.reading`, db.Schema)).Scan(&readings))
	require.Zero(t, readings)

	require.EqualValues(t, 1, lateData(true).Changed)
	select {
	case s := <-runs:
		require.True(t, s.Start.Equal(from.Add(time.Hour)))
		require.EqualValues(t, 2, s.Generation, "a re-open is a new generation")
	case <-time.After(30 * time.Second):
		t.Fatal("the commit did not wake the idle worker (its poll is an hour)")
	}
}
