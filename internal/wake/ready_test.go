package wake_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/wake"
)

// TestReadyNamesSeriesWithAcquirableSlots: Ready names a series for an
// AVAILABLE slot that is due and not waiting, or for a lease expired past
// the grace; not for slots that wait (a future retry, parked), that are not
// due yet, that are finished, or for leases still valid or within the
// grace.
func TestReadyNamesSeriesWithAcquirableSlots(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema))
		require.NoError(t, err)
	}
	// One slot per series, named after what it is; a series ending in _yes
	// must be named, one ending in _no must not.
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, not_before, owner, lease_until, completed_at)
	SELECT v.name, 'PT1M', now() + v.start_min * interval '1 minute', now() + (v.start_min + 1) * interval '1 minute',
		v.status, now() + v.not_before_s * interval '1 second', CASE WHEN v.status = 'ACQUIRED' THEN gen_random_uuid() END,
		now() + v.lease_s * interval '1 second', CASE WHEN v.status = 'COMPLETE' THEN now() END
	FROM (VALUES
		('due_yes', -10, 'AVAILABLE', NULL::int, NULL::int),
		('retried_yes', -10, 'AVAILABLE', -1, NULL),
		('backoff_no', -10, 'AVAILABLE', 3600, NULL),
		('future_no', 10, 'AVAILABLE', NULL, NULL),
		('running_no', 0, 'AVAILABLE', NULL, NULL),
		('complete_no', -10, 'COMPLETE', NULL, NULL),
		('held_no', -10, 'ACQUIRED', NULL, 60),
		('graced_no', -10, 'ACQUIRED', NULL, -2),
		('expired_yes', -10, 'ACQUIRED', NULL, -60)
	) AS v(name, start_min, status, not_before_s, lease_s)`)
	exec(`UPDATE {{schema}}.slot SET not_before = 'infinity' WHERE name = 'backoff_no'`)
	// A parked slot ahead of a due one: the due one counts.
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, not_before) VALUES
		('behindparked_yes', 'PT1M', now() - interval '20 minutes', now() - interval '19 minutes', 'AVAILABLE', 'infinity'),
		('behindparked_yes', 'PT1M', now() - interval '10 minutes', now() - interval '9 minutes', 'AVAILABLE', NULL),
		('parked_no', 'PT1M', now() - interval '20 minutes', now() - interval '19 minutes', 'AVAILABLE', 'infinity')`)

	keys, err := wake.Ready(ctx, db.Pool, db.Schema, 0, 30*time.Second)
	require.NoError(t, err)
	var names []string
	for _, k := range keys {
		require.Equal(t, "PT1M", k.Interval)
		names = append(names, k.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"behindparked_yes", "due_yes", "expired_yes", "retried_yes"}, names)

	// A lag longer than a slot's age leaves it out; a grace shorter than
	// an expiry takes the lease in.
	keys, err = wake.Ready(ctx, db.Pool, db.Schema, 15*time.Minute, time.Second)
	require.NoError(t, err)
	names = names[:0]
	for _, k := range keys {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"expired_yes", "graced_no"}, names)
}

// TestReadyLeavesOutPausedSeries: a paused series is not named, for a due
// slot nor for an expired lease, so that a poll does not wake its workers
// for claims that take nothing; a series whose stored lag is longer than
// its slot's age is not named either. Series without a row are named as
// before.
func TestReadyLeavesOutPausedSeries(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema))
		require.NoError(t, err)
	}
	exec(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin, paused_at, lag) VALUES
		('paused_no', 'PT1M', 'UTC', '2000-01-01', now(), NULL),
		('pausedheld_no', 'PT1M', 'UTC', '2000-01-01', now(), NULL),
		('running_yes', 'PT1M', 'UTC', '2000-01-01', NULL, NULL),
		('lagged_no', 'PT1M', 'UTC', '2000-01-01', NULL, interval '1 hour')`)
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, owner, lease_until)
	SELECT v.name, 'PT1M', now() - interval '10 minutes', now() - interval '9 minutes', v.status,
		CASE WHEN v.status = 'ACQUIRED' THEN gen_random_uuid() END, CASE WHEN v.status = 'ACQUIRED' THEN now() - interval '1 hour' END
	FROM (VALUES ('paused_no', 'AVAILABLE'), ('pausedheld_no', 'ACQUIRED'), ('running_yes', 'AVAILABLE'),
		('lagged_no', 'AVAILABLE'), ('unregistered_yes', 'AVAILABLE')) AS v(name, status)`)
	keys, err := wake.Ready(ctx, db.Pool, db.Schema, 0, time.Second)
	require.NoError(t, err)
	var names []string
	for _, k := range keys {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"running_yes", "unregistered_yes"}, names)
}
