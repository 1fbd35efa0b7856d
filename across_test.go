package almanac

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// acrossKind tells the claim across series (acquire.RunAcross) and a
// series' own claim apart from the rest.
func acrossKind(sql string) string {
	switch {
	case strings.Contains(sql, "WITH ORDINALITY") && strings.Contains(sql, "SKIP LOCKED"):
		return "across"
	case strings.Contains(sql, "expired AS (") && strings.Contains(sql, "SKIP LOCKED"):
		return "claim"
	}
	return "other"
}

// seedSlots inserts the due PT1M slots [from, from + n minutes) of each
// named series, registered already, as plain SQL would: the jobs find them
// through the poll.
func seedSlots(t *testing.T, db *pgtest.DB, names []string, from time.Time, n int) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), strings.ReplaceAll(`INSERT INTO {{schema}}.series (name, "interval", time_zone, origin)
		SELECT s, 'PT1M', 'UTC', '0001-01-01T00:00:00Z' FROM unnest($1::text[]) AS s ON CONFLICT DO NOTHING`, "{{schema}}", db.Schema), names)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), strings.ReplaceAll(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
		SELECT s, 'PT1M', t, t + interval '1 minute' FROM unnest($1::text[]) AS s,
			generate_series($2::timestamptz, $2::timestamptz + ($3 - 1) * interval '1 minute', interval '1 minute') AS t`, "{{schema}}", db.Schema),
		names, from, n)
	require.NoError(t, err)
}

// TestBatchedJobsShareTransactions: 200 batched jobs of 200 series, each
// with one due slot, run their slots in transactions across series, not
// one per series; every slot's work commits exactly once, and a handler
// that fails among them rolls back only its own slot, which runs again.
func TestBatchedJobsShareTransactions(t *testing.T) {
	db := pgtest.New(t)
	tally := &sqlTally{by: map[string]int{}, tell: acrossKind}
	pool := tallyPool(t, db, tally)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE `+db.Schema+`.effect (name text, slot_start timestamptz)`)
	require.NoError(t, err)
	const n, batch = 200, 50
	from := minutesAgo(3)
	e := newEngine(pool, Options{Schema: db.Schema, PollInterval: time.Hour}, nil)
	var mu sync.Mutex
	failed := false
	for i := range n {
		require.NoError(t, e.add(Job{Series: series(t, fmt.Sprintf("x_%03d", i), "PT1M"), From: from, To: from.Add(time.Minute), Batch: batch,
			Policy: Policy{Retry: func(int, error) (time.Duration, bool) { return 0, true }},
			Handler: func(ctx context.Context, tx pgx.Tx, s acquire.Slot) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+db.Schema+`.effect VALUES ($1, $2)`, s.Name, s.Start); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if s.Name == "x_117" && !failed {
					failed = true
					return errors.New("the first attempt fails after writing")
				}
				return nil
			}}))
	}
	startEngine(t, e)
	waitCompleted(t, db, n, time.Minute)
	waitIdle(t, e)
	require.True(t, failed)
	require.Equal(t, n, count(t, db, `SELECT count(*) FROM {{schema}}.effect`), "one committed effect per slot")
	require.Equal(t, n, count(t, db, `SELECT count(DISTINCT name) FROM {{schema}}.effect`))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot_event WHERE event = 'failed' AND name = 'x_117'`))
	c := tally.counts()
	require.Positive(t, c["across"])
	// Without batches across series: a claim per series, 200.
	require.LessOrEqual(t, c["across"]+c["claim"], n/5, "claims for %d slots of %d series (%d across)", n, n, c["across"])
}

// TestAcrossLeavesPausedAndCappedSeries: among batched jobs working across
// series, all woken, a paused series runs nothing, and a capped one whose
// one permit another process holds (a lease) runs nothing more until that
// lease completes; the engine then rests, and the capped series' slot runs
// once the lease is done.
func TestAcrossLeavesPausedAndCappedSeries(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const n = 12
	from := minutesAgo(5)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c_%02d", i)
	}
	seedSlots(t, db, names, from, 2)
	_, err := db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.series SET paused_at = clock_timestamp(), paused_by = 't', paused_reason = 't' WHERE name = 'c_03'`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.series SET max_in_flight = 1 WHERE name = 'c_07'`)
	require.NoError(t, err)
	other, err := acquire.New(ctx, db.Pool, series(t, "c_07", "PT1M"), acquire.Options{Schema: db.Schema})
	require.NoError(t, err)
	held, err := other.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, held, 1)

	e := newEngine(db.Pool, Options{Schema: db.Schema, PollInterval: 50 * time.Millisecond}, nil)
	for _, name := range names {
		require.NoError(t, e.add(Job{Series: series(t, name, "PT1M"), From: from, To: from.Add(2 * time.Minute), Batch: 10,
			Handler: func(context.Context, pgx.Tx, acquire.Slot) error { return nil }}))
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	require.NoError(t, e.start(runCtx))
	defer func() { require.NoError(t, e.stop(context.Background())) }()
	e.wakeAll() // the paused and the capped series' jobs look too
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`) >= 2*(n-2)
	}, time.Minute, 5*time.Millisecond)
	waitIdle(t, e)
	require.Equal(t, 2*(n-2), count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'c_03' AND status = 'AVAILABLE'`), "the paused series ran nothing")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'c_07' AND status = 'AVAILABLE'`), "the capped series ran nothing past its cap")

	_, err = other.CompleteMany(ctx, held)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE name = 'c_07' AND status = 'COMPLETE'`) == 2
	}, time.Minute, 5*time.Millisecond)
}

// TestAcrossIsFairAcrossSeries: 1,000 batched series with three due slots
// each, default settings: batches across series take one slot per series
// in the order the series got work, so every series runs its first slot
// before any runs its third, give or take the batches in flight.
func TestAcrossIsFairAcrossSeries(t *testing.T) {
	db := pgtest.New(t)
	const n, batch = 1000, 25
	from := minutesAgo(5)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("f_%04d", i)
	}
	seedSlots(t, db, names, from, 3)
	var mu sync.Mutex
	runs := map[string][]int{}
	order := 0
	e := newEngine(db.Pool, Options{Schema: db.Schema, PollInterval: time.Hour, Concurrency: 4}, nil)
	for _, name := range names {
		require.NoError(t, e.add(Job{Series: series(t, name, "PT1M"), From: from, To: from.Add(3 * time.Minute), Batch: batch,
			Handler: func(ctx context.Context, tx pgx.Tx, s acquire.Slot) error {
				mu.Lock()
				defer mu.Unlock()
				runs[s.Name] = append(runs[s.Name], order)
				order++
				return nil
			}}))
	}
	startEngine(t, e)
	waitCompleted(t, db, 3*n, 2*time.Minute)
	mu.Lock()
	defer mu.Unlock()
	firstThird := 3 * n
	lastFirst := 0
	for _, name := range names {
		r := runs[name]
		require.Len(t, r, 3, name)
		lastFirst = max(lastFirst, r[0])
		firstThird = min(firstThird, r[2])
	}
	// The batches in flight (Concurrency of them) may overlap.
	require.Less(t, lastFirst, firstThird+4*batch, "a series ran its first slot at run %d, after another ran its third at run %d", lastFirst, firstThird)
}
