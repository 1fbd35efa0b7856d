package acquire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/slot"
)

// acrossFixture is the fixture's schema with n more PT1M series, s000 to
// s<n-1>, each with perSeries due slots, and their queues.
type acrossFixture struct {
	*fixture
	queues []*Queue
}

func newAcrossFixture(t testing.TB, n, perSeries int) *acrossFixture {
	t.Helper()
	f := &acrossFixture{fixture: newFixture(t, 0)}
	f.exec(`ALTER TABLE {{schema}}.effect ADD COLUMN name text NOT NULL DEFAULT ''`)
	ctx := context.Background()
	for i := range n {
		grid, err := slot.NewSeries(fmt.Sprintf("s%03d", i), mustInterval("PT1M"), time.UTC, time.Time{})
		require.NoError(t, err)
		_, _, err = seriesdb.Add(ctx, f.db.Pool, f.schema, grid)
		require.NoError(t, err)
		f.exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
			SELECT $1, 'PT1M', s, s + interval '1 minute' FROM generate_series($2::timestamptz, $2::timestamptz + ($3 - 1) * interval '1 minute', interval '1 minute') AS s`,
			grid.Name(), f.slotStart(0), perSeries)
		q, err := New(ctx, f.db.Pool, grid, Options{Schema: f.schema})
		require.NoError(t, err)
		f.queues = append(f.queues, q)
	}
	return f
}

// handlers returns one handler per queue, each h.
func (f *acrossFixture) handlers(h Handler) []Handler {
	hs := make([]Handler, len(f.queues))
	for i := range hs {
		hs[i] = h
	}
	return hs
}

// writeNamed records the slot's effect with its series' name.
func (f *acrossFixture) writeNamed(ctx context.Context, tx pgx.Tx, s Slot) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+f.db.Schema+`.effect (name, slot_start, fence, mode) VALUES ($1, $2, $3, 'across')`, s.Name, s.Start, s.Fence)
	return err
}

// TestRunAcrossExactlyOnce: workers running RunAcross over the same 30
// series (two slots each) at once run every slot exactly once; one
// series' handler fails its first attempt after writing, and only its
// slot is rolled back and recorded as failed, in the same transactions as
// the others' completions.
func TestRunAcrossExactlyOnce(t *testing.T) {
	f := newAcrossFixture(t, 30, 2)
	ctx := context.Background()
	var mu sync.Mutex
	failed := false
	h := func(ctx context.Context, tx pgx.Tx, s Slot) error {
		if err := f.writeNamed(ctx, tx, s); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if s.Name == "s007" && s.Start.Equal(f.slotStart(0)) && !failed {
			failed = true
			return errors.New("boom")
		}
		return nil
	}
	// A retry of the failure is due at once.
	for _, q := range f.queues {
		q.opts.Retry = func(int, error) (time.Duration, bool) { return 0, true }
	}
	var wg sync.WaitGroup
	var sawFailure sync.Once
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				results, err := RunAcross(ctx, f.queues, f.handlers(h))
				if !assert.NoError(t, err) {
					return
				}
				n := 0
				for i, rs := range results {
					n += len(rs)
					for _, r := range rs {
						assert.Equal(t, f.queues[i].name, r.Slot.Name)
						if r.Outcome == Failed {
							sawFailure.Do(func() {
								assert.Equal(t, "s007", r.Slot.Name)
								assert.Equal(t, "AVAILABLE", f.stateOf("s007", r.Slot.Start))
							})
						} else {
							assert.Equal(t, Completed, r.Outcome)
						}
					}
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.True(t, failed)
	require.Equal(t, 60, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE' AND name LIKE 's%'`))
	require.Equal(t, 60, f.count(`SELECT count(*) FROM {{schema}}.effect`), "one effect per slot: the failed run's was rolled back")
	require.Equal(t, 60, f.count(`SELECT count(DISTINCT (name, slot_start)) FROM {{schema}}.effect`))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot_event WHERE event = 'failed'`))
}

// stateOf reads a slot's status from outside the transaction that holds it.
func (f *acrossFixture) stateOf(name string, start time.Time) string {
	var status string
	require.NoError(f.t, f.db.Pool.QueryRow(context.Background(),
		`SELECT status FROM `+f.db.Schema+`.slot WHERE name = $1 AND "interval" = 'PT1M' AND slot_start = $2`, name, start).Scan(&status))
	return status
}

// TestRunAcrossOneTransaction: one call takes the first slot of each of 20
// series, in one statement and one transaction: the fence of every slot of
// the batch comes with the same transaction, and the slots are committed
// together.
func TestRunAcrossOneTransaction(t *testing.T) {
	f := newAcrossFixture(t, 20, 3)
	ctx := context.Background()
	var xids sync.Map
	results, err := RunAcross(ctx, f.queues, f.handlers(func(ctx context.Context, tx pgx.Tx, s Slot) error {
		var xid int64
		if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
			return err
		}
		xids.Store(xid, true)
		return nil
	}))
	require.NoError(t, err)
	n := 0
	for i, rs := range results {
		require.Len(t, rs, 1, "one slot per series")
		require.Equal(t, f.slotStart(0), rs[0].Slot.Start.UTC(), "its first")
		require.Equal(t, f.queues[i].name, rs[0].Slot.Name)
		n++
	}
	require.Equal(t, 20, n)
	count := 0
	xids.Range(func(any, any) bool { count++; return true })
	require.Equal(t, 1, count, "every handler ran in the one transaction")
	require.Equal(t, 20, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
}

// TestRunAcrossControls: inside a batch across series, a paused series, a
// capped one, one whose upstream has not finished the slot's span and one
// whose series lag holds its slots back give nothing, and the others give
// their slot; only the capped series' result says RunBatch may find work
// (empty, not nil), and its slot is then taken by RunBatch, within its
// cap. So is an expired lease's.
func TestRunAcrossControls(t *testing.T) {
	f := newAcrossFixture(t, 6, 1)
	ctx := context.Background()
	f.exec(`UPDATE {{schema}}.series SET paused_at = clock_timestamp(), paused_by = 'test', paused_reason = 'test' WHERE name = 's001'`)
	f.exec(`UPDATE {{schema}}.series SET max_in_flight = 1 WHERE name = 's002'`)
	f.exec(`INSERT INTO {{schema}}.series_dependency (name, "interval", up_name, up_interval) VALUES ('s003', 'PT1M', 's000', 'PT1M')`)
	f.exec(`UPDATE {{schema}}.series SET lag = interval '1000000 hours' WHERE name = 's004'`)
	ran := map[string]bool{}
	var mu sync.Mutex
	results, err := RunAcross(ctx, f.queues, f.handlers(func(ctx context.Context, tx pgx.Tx, s Slot) error {
		mu.Lock()
		ran[s.Name] = true
		mu.Unlock()
		return nil
	}))
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"s000": true, "s005": true}, ran)
	for i, name := range []string{"s000", "s001", "s002", "s003", "s004", "s005"} {
		want := 0
		if ran[name] {
			want = 1
		}
		require.Len(t, results[i], want, name)
	}
	require.NotNil(t, results[2], "the capped series may have work for RunBatch")
	for _, i := range []int{1, 3, 4} {
		require.Nil(t, results[i], "series %d has no work for RunBatch either", i)
	}

	// s000 is done now: s003's slot is due.
	results, err = RunAcross(ctx, f.queues, f.handlers(func(context.Context, pgx.Tx, Slot) error { return nil }))
	require.NoError(t, err)
	require.Len(t, results[3], 1, "the upstream finished")
	require.Empty(t, results[2], "a capped series is left to RunBatch")

	// A queue opened now knows of the cap (an open one reads it within
	// a second).
	capped, err := New(ctx, f.db.Pool, f.queues[2].grid, Options{Schema: f.schema})
	require.NoError(t, err)
	rs, err := capped.RunBatch(ctx, 5, func(context.Context, pgx.Tx, Slot) error { return nil })
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, 0, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE' AND name IN ('s000', 's002', 's003', 's005')`))
	require.Equal(t, 2, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE'`), "the paused and the lagging series' slots")

	// s005's slot is held by a lease that expired: left to RunBatch, and
	// said so; s000, done, has nothing.
	f.exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() - interval '1 hour' WHERE name = 's005'`)
	results, err = RunAcross(ctx, f.queues, f.handlers(func(context.Context, pgx.Tx, Slot) error { return nil }))
	require.NoError(t, err)
	require.NotNil(t, results[5], "an expired lease is RunBatch's")
	require.Empty(t, results[5])
	require.Nil(t, results[0], "nothing left")
}

// TestRunAcrossRefusesMixedQueues: queues that cannot share a transaction,
// or the same series twice, are refused before anything is locked.
func TestRunAcrossRefusesMixedQueues(t *testing.T) {
	f := newAcrossFixture(t, 2, 1)
	ctx := context.Background()
	newest, err := New(ctx, f.db.Pool, f.queues[1].grid, Options{Schema: f.schema, Policy: Policy{NewestFirst: true}})
	require.NoError(t, err)
	nop := func(context.Context, pgx.Tx, Slot) error { return nil }
	for _, qs := range [][]*Queue{{f.queues[0], newest}, {f.queues[0], f.queues[0]}, {}} {
		_, err := RunAcross(ctx, qs, make([]Handler, len(qs)))
		require.ErrorIs(t, err, slot.ErrInvalid)
	}
	_, err = RunAcross(ctx, f.queues, []Handler{nop})
	require.ErrorIs(t, err, slot.ErrInvalid)
	require.Equal(t, 2, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE'`))
}
