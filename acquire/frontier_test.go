package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// busyProcess returns a queue on a pool of its own, as another process
// has, whose floor is at slot from of the fixture and whose searches have
// come back full, so that its next search draws from the frontier.
func busyProcess(t *testing.T, f *fixture, from int, opts Options) *Queue {
	t.Helper()
	q := f.queueOn(pgtest.OwnPool(t, f.db.URL, 4, ""), opts)
	q.floor.every = time.Hour
	q.floor.at, q.floor.full = f.slotStart(from), time.Now()
	q.frontier.busy = true
	return q
}

// frontierAt returns the series' frontier for parts of n slots, false
// when no process has drawn from it.
func frontierAt(t *testing.T, f *fixture, n int) (int64, bool) {
	t.Helper()
	var next int64
	err := f.db.Pool.QueryRow(context.Background(), `SELECT next_part FROM `+f.schema+`.slot_frontier
		WHERE name = 'report' AND "interval" = 'PT1M' AND part_slots = $1`, n).Scan(&next)
	if err == pgx.ErrNoRows {
		return 0, false
	}
	require.NoError(t, err)
	return next, true
}

// TestProcessesDrawBlocksOfTheirOwn: two processes whose floors are at the
// same place draw different blocks of the series' frontier. The second,
// while the first holds its batch, starts at its own block instead of
// stepping over the first one's locked rows, which it did before.
func TestProcessesDrawBlocksOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 3*int(blockOf(100))*100) // three blocks of parts of 100
	f.exec(`VACUUM ANALYZE {{schema}}.slot`)
	a, b := busyProcess(t, f, 0, Options{}), busyProcess(t, f, 0, Options{})

	release := holdBatch(a, 100)
	index := f.schema + ".slot_available_idx"
	before := pgtest.EntriesRead(t, b.pool, index)
	second, err := b.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	read := pgtest.EntriesRead(t, b.pool, index) - before
	first, err := release()
	require.NoError(t, err)

	require.Len(t, first, 100)
	require.True(t, first[0].Slot.Start.Equal(f.slotStart(0)), "the first process starts at its floor")
	part, ok := a.partOf(f.slotStart(0), 100)
	require.True(t, ok)
	block, err := b.grid.Slot((part + blockOf(100)) * 100)
	require.NoError(t, err)
	require.Len(t, second, 100)
	require.True(t, second[0].Slot.Start.Equal(block.Start), "the second process starts at the block after the first's: %s, want %s",
		second[0].Slot.Start, block.Start)
	next, ok := frontierAt(t, f, 100)
	require.True(t, ok)
	require.Equal(t, part+2*blockOf(100), next)
	t.Logf("the second process's batch read %d entries of slot_available_idx", read)
	require.Less(t, read, int64(150), "entries read by a batch of 100 while another process's batch held 100")
}

// TestShortSearchesDrawNothing: a queue whose searches come back short (a
// series in steady state) never draws from the frontier; one whose search
// came back full does.
func TestShortSearchesDrawNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 250)
	q := f.queue(Options{})
	q.floor.every = time.Hour
	for range 3 {
		_, err := q.RunBatch(ctx, 1_000, noop) // all 250, then none
		require.NoError(t, err)
	}
	_, drawn := frontierAt(t, f, 1_000)
	require.False(t, drawn, "short searches drew from the frontier")
	// Nor does a queue that never drew lower it when its scheduler is
	// woken (Rewind) and its searches from the start of the range take
	// slots.
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE slot_start < $1`, f.slotStart(10))
	q.Rewind()
	results, err := q.RunBatch(ctx, 1_000, noop)
	require.NoError(t, err)
	require.Len(t, results, 10)
	require.False(t, q.frontier.lower, "a queue that never drew asks to lower the frontier")

	g := newFixture(t, 250)
	p := g.queue(Options{})
	p.floor.every = time.Hour
	for range 2 { // from the start of the range, full; then from the floor
		results, err := p.RunBatch(ctx, 100, noop)
		require.NoError(t, err)
		require.Len(t, results, 100)
	}
	_, drawn = frontierAt(t, g, 100)
	require.True(t, drawn, "a search after a full one draws from the frontier")
}

// TestFrontierComesBack: a short search lowers the frontier to the part of
// the earliest slot it took, and so does the first search from the start
// of the range after Rewind, so that every process's next blocks go
// through the slots made acquirable behind it, oldest first; the periodic
// search from the start of the range lowers nothing.
func TestFrontierComesBack(t *testing.T) {
	ctx := context.Background()
	n := 3 * int(blockOf(100)) * 100 // three blocks of parts of 100
	f := newFixture(t, n)
	q := busyProcess(t, f, 0, Options{})
	part := func(i int) int64 {
		p, ok := q.partOf(f.slotStart(i), 100)
		require.True(t, ok)
		return p
	}
	another := busyProcess(t, f, 0, Options{})
	_, err := another.RunBatch(ctx, 100, noop) // draws the first block
	require.NoError(t, err)
	results, err := q.RunBatch(ctx, 100, noop) // draws the second and starts there
	require.NoError(t, err)
	require.Len(t, results, 100)
	next, _ := frontierAt(t, f, 100)
	require.Equal(t, part(0)+2*blockOf(100), next)

	// The periodic search from the start of the range takes what the other
	// process's block still holds, and lowers nothing.
	q.floor.full = time.Time{}
	results, err = q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	require.True(t, results[0].Slot.Start.Equal(f.slotStart(100)), "got %s", results[0].Slot.Start)
	_, err = q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	next, _ = frontierAt(t, f, 100)
	require.GreaterOrEqual(t, next, part(0)+2*blockOf(100), "the periodic search lowered the frontier")

	// Re-opened behind the frontier and Rewind: the first search from the
	// start of the range takes them, and the next lowers the frontier to
	// them.
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE slot_start < $1`, f.slotStart(100))
	q.Rewind()
	results, err = q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	require.True(t, results[0].Slot.Start.Equal(f.slotStart(0)), "got %s", results[0].Slot.Start)
	q.lowerFrontier(ctx)
	next, _ = frontierAt(t, f, 100)
	require.Equal(t, part(0), next, "the frontier after the search that took the re-opened slots")

	// A short search lowers it to the earliest slot it took: here the one
	// that jumps to the frontier, past the last slots, finds nothing there
	// and takes what is left behind it.
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE' WHERE slot_start < $1 OR slot_start >= $2`, f.slotStart(n-100), f.slotStart(n-50))
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE slot_start >= $1 AND slot_start < $2`, f.slotStart(n-100), f.slotStart(n-50))
	q.frontier.busy = true
	f.exec(`UPDATE {{schema}}.slot_frontier SET next_part = $1`, part(n-1)+1)
	results, err = q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	require.Len(t, results, 50)
	require.True(t, results[0].Slot.Start.Equal(f.slotStart(n-100)), "got %s", results[0].Slot.Start)
	q.lowerFrontier(ctx)
	next, _ = frontierAt(t, f, 100)
	require.Equal(t, part(n-100), next, "the frontier after a short search")
}

// TestFrontierPastTheRange: a queue whose range ends before the frontier
// draws nothing and searches from its own floor.
func TestFrontierPastTheRange(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 1_000)
	q := busyProcess(t, f, 200, Options{To: f.slotStart(500)})
	far, ok := q.partOf(f.slotStart(900), 100)
	require.True(t, ok)
	f.exec(`INSERT INTO {{schema}}.slot_frontier (name, "interval", part_slots, next_part) VALUES ('report', 'PT1M', 100, $1)`, far)
	results, err := q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	require.Len(t, results, 100)
	require.True(t, results[0].Slot.Start.Equal(f.slotStart(200)), "got %s", results[0].Slot.Start)
	next, _ := frontierAt(t, f, 100)
	require.Equal(t, far, next, "a draw past the range moved the frontier")
}

// TestFrontierIsAHint: without the frontier's table (a draw that fails for
// any reason) a queue goes on from its own floor, and takes every slot
// once, in order.
func TestFrontierIsAHint(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 500)
	f.exec(`DROP TABLE {{schema}}.slot_frontier`)
	q := busyProcess(t, f, 0, Options{})
	var ran []time.Time
	for {
		results, err := q.RunBatch(ctx, 100, func(_ context.Context, _ pgx.Tx, s Slot) error {
			ran = append(ran, s.Start)
			return nil
		})
		require.NoError(t, err)
		if len(results) == 0 {
			break
		}
	}
	require.Len(t, ran, 500)
	for i, s := range ran {
		require.True(t, s.Equal(f.slotStart(i)), "run %d was slot %s", i, s)
	}
}

// TestDrawsNeedNoSecondConnection: a locked-mode worker draws from the
// frontier before it takes its transaction's connection, so that a draw
// never uses the connections kept for completions. Here those are taken,
// and the one connection the worker may hold is the only one there is:
// a draw made while the transaction held it would wait for another until
// it timed out, and fall back on the floor without drawing.
func TestDrawsNeedNoSecondConnection(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 1_000)
	pool := pgtest.OwnPool(t, f.db.URL, 1+defaultReserve, "")
	q := f.queueOn(pool, Options{})
	q.floor.every = time.Hour
	q.floor.at, q.floor.full = f.slotStart(0), time.Now()
	q.frontier.busy = true
	for range defaultReserve {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
	}
	results, err := q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	require.Len(t, results, 100)
	_, drawn := frontierAt(t, f, 100)
	require.True(t, drawn, "the worker drew with the one connection it may hold")
}
