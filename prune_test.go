package almanac

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestCommandSeesTheGeneration: after a re-open the command runs again as
// a new computation: ALMANAC_GENERATION and ALMANAC_COMPUTATION_KEY change,
// ALMANAC_KEY does not, and ALMANAC_ATTEMPT starts again at 1.
func TestCommandSeesTheGeneration(t *testing.T) {
	db := pgtest.New(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cmd := Command{Path: "/bin/sh", Args: []string{"-c",
		`echo "$ALMANAC_ATTEMPT $ALMANAC_GENERATION|$ALMANAC_KEY|$ALMANAC_COMPUTATION_KEY" >> "$OUT"`},
		Env: []string{"OUT=" + out}}
	g := series(t, "gen", "PT1M")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := Job{Series: g, From: start, LeaseHandler: cmd.LeaseHandler(), To: start.Add(time.Minute)}
	runOnce := func() {
		t.Helper()
		e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
		require.NoError(t, e.add(job))
		sum, err := e.drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, Summary{Completed: 1}, sum)
	}
	runOnce()
	cov, err := coverage.New(context.Background(), db.Pool, g, coverage.Options{Schema: db.Schema})
	require.NoError(t, err)
	_, err = cov.Reopen(context.Background(), start, start.Add(time.Minute), coverage.WriteOptions{Reason: "late data"})
	require.NoError(t, err)
	runOnce()
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "1 1|gen 2026-01-01T00:00:00Z/PT1M|gen 2026-01-01T00:00:00Z/PT1M 1\n"+
		"1 2|gen 2026-01-01T00:00:00Z/PT1M|gen 2026-01-01T00:00:00Z/PT1M 2\n", string(got))
}

// TestSchedulerPrunesHistory: every sweep interval a running scheduler
// deletes the history past the retention.
func TestSchedulerPrunesHistory(t *testing.T) {
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), sqlschema.Render(`INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation)
		VALUES (clock_timestamp() - interval '91 days', 'old', 'PT1M', '2026-01-01T00:00:00Z', 'completed', 1),
		       (clock_timestamp() - interval '1 day', 'recent', 'PT1M', '2026-01-01T00:00:00Z', 'completed', 1)`, db.Schema))
	require.NoError(t, err)
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEngine(db.Pool, Options{Schema: db.Schema, Clock: clock}, nil)
	e.sweep = time.Hour
	require.NoError(t, e.add(Job{Series: series(t, "idle", "PT1M"), From: clock.Now(),
		Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
	require.NoError(t, e.start(context.Background()))
	defer func() { require.NoError(t, e.stop(context.Background())) }()
	// The pruner waits for the sweep interval on the clock: advance it once
	// the pruner waits.
	require.Eventually(t, func() bool { return clock.waitsFor(clock.Now().Add(time.Hour)) }, 10*time.Second, time.Millisecond)
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM {{schema}}.slot_event`), "nothing before the sweep interval")
	clock.Advance(time.Hour)
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot_event`) == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot_event WHERE name = 'recent'`))
}

// waitsFor reports whether a timer of the clock fires at at.
func (c *fakeClock) waitsFor(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.at.Equal(at) {
			return true
		}
	}
	return false
}
