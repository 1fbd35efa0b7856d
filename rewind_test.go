package almanac

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestWakeRewindsTheQueue: a job's queue searches from the earliest slot
// its last claim took, so a slot re-opened behind that point is found only
// by a search from the start of the range. A wake-up (the notification a
// re-open sends) makes the next claim search from there at once, not after
// the queue's periodic search a second later.
func TestWakeRewindsTheQueue(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newEngine(db.Pool, Options{Schema: db.Schema}, nil)
	require.NoError(t, e.add(Job{Series: series(t, "rewind", "PT1M"), From: from, To: from.Add(40 * time.Minute),
		LeaseHandler: func(context.Context, *acquire.Lease) error { return nil }}))
	require.NoError(t, e.prepare(ctx))
	j := e.jobs[0]
	_, err := db.Pool.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
		SELECT 'rewind', 'PT1M', s, s + interval '1 minute' FROM generate_series($1::timestamptz, $2, interval '1 minute') AS s`, db.Schema),
		from, from.Add(39*time.Minute))
	require.NoError(t, err)

	claim := func(n int) []*acquire.Lease {
		t.Helper()
		leases, err := j.queue.Claim(ctx, n)
		require.NoError(t, err)
		require.Len(t, leases, n)
		return leases
	}
	first := claim(10)
	claim(10) // the queue now searches from slot 10
	_, _, err = first[0].Finish(ctx, nil)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE slot_start = $1`, db.Schema), from)
	require.NoError(t, err)

	e.wake(j)
	got := claim(1)
	require.True(t, got[0].Start.Equal(from), "the re-opened slot first, got %s", got[0].Start)
}
