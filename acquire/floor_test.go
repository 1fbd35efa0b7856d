package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

// TestSearchesStartAtTheFloor: while a transaction holds its snapshot, the
// entries slot_available_idx keeps for acquired slots cannot be marked
// dead, and a search from the start of the range steps over every one of
// them. Here 2,000 slots are claimed and completed under such a snapshot,
// then five claims of 10 count the entries they read: from the start of
// the range, each reads the 2,000 again; from the floor, about one batch.
func TestSearchesStartAtTheFloor(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 20_000)
	f.exec(`VACUUM ANALYZE {{schema}}.slot`)

	// The oldest snapshot in the cluster, for the whole test.
	holder, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	_, err = holder.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT count(*) FROM pg_class`)
	require.NoError(t, err)

	pool := pgtest.OwnPool(t, f.db.URL, 3, "")
	q := f.queueOn(pool, Options{Policy: Policy{LeaseTTL: time.Hour}})
	q.floor.every = time.Hour // no periodic full search during the test
	cycle := func(n int) {
		leases, err := q.Claim(ctx, n)
		require.NoError(t, err)
		require.Len(t, leases, n)
		lost, err := q.CompleteMany(ctx, leases)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
	for range 20 {
		cycle(100)
	}
	index := f.schema + ".slot_available_idx"
	before := pgtest.EntriesRead(t, pool, index)
	const claims = 5
	for range claims {
		cycle(10)
	}
	n := pgtest.EntriesRead(t, pool, index) - before
	t.Logf("%d entries of slot_available_idx read by %d claims", n, claims)
	require.Less(t, n, int64(claims*250), "entries read by %d claims of 10 after 2,000 slots were acquired under an old snapshot", claims)
}

// TestFloorMissesNothing: what the floor skips is found. A slot this queue
// gives back behind the floor is taken first; one made AVAILABLE behind it
// by someone else is taken once the search from the floor comes up short,
// or after Rewind.
func TestFloorMissesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 40)
	q := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}})
	q.floor.every = time.Hour
	claim := func(n int) []*Lease {
		t.Helper()
		leases, err := q.Claim(ctx, n)
		require.NoError(t, err)
		return leases
	}
	first := claim(10) // 0-9
	second := claim(10)
	require.True(t, second[0].Start.Equal(f.slotStart(10)))

	// Given back by this queue: first in line again.
	require.NoError(t, first[3].Release(ctx))
	got := claim(1)
	require.True(t, got[0].Start.Equal(f.slotStart(3)), "got %s", got[0].Start)

	// Re-opened by plain SQL behind the floor while there is work after
	// it: left for later, then taken after Rewind.
	require.NoError(t, first[0].Complete(ctx))
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE slot_start = $1`, f.slotStart(0))
	got = claim(1)
	require.True(t, got[0].Start.Equal(f.slotStart(20)), "got %s", got[0].Start)
	q.Rewind()
	got = claim(1)
	require.True(t, got[0].Start.Equal(f.slotStart(0)), "got %s", got[0].Start)

	// Nothing after the floor: a short search looks behind it.
	rest := claim(100) // 21-39
	require.Len(t, rest, 19)
	require.NoError(t, first[1].Complete(ctx))
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE' WHERE slot_start = $1`, f.slotStart(1))
	got = claim(5)
	require.Len(t, got, 1)
	require.True(t, got[0].Start.Equal(f.slotStart(1)), "got %s", got[0].Start)
}

// TestFloorLockedNoSlotTwice: in locked mode a short search looks behind
// the floor in the same transaction, and must not take again the expired
// lease the first look took over (its row is locked by that transaction,
// which SKIP LOCKED does not skip).
func TestFloorLockedNoSlotTwice(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 30)
	q := f.queue(Options{})
	q.floor.every = time.Hour
	f.exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() + interval '1 hour'
		WHERE slot_start = $1`, f.slotStart(5))
	var ran []time.Time
	h := func(_ context.Context, _ pgx.Tx, s Slot) error {
		ran = append(ran, s.Start)
		return nil
	}
	for range 2 { // 0-4 and 6-10, then 11-20: the floor is at 11
		results, err := q.RunBatch(ctx, 10, h)
		require.NoError(t, err)
		require.Len(t, results, 10)
	}
	f.exec(`UPDATE {{schema}}.slot SET lease_until = now() - interval '1 hour' WHERE slot_start = $1`, f.slotStart(5))
	ran = nil
	results, err := q.RunBatch(ctx, 100, h)
	require.NoError(t, err)
	require.Len(t, results, 10, "the expired lease and slots 21-29, each once: %v", ran)
	require.Len(t, ran, 10)
	seen := map[time.Time]bool{}
	for _, s := range ran {
		require.False(t, seen[s], "slot %s ran twice", s)
		seen[s] = true
	}
	require.True(t, seen[f.slotStart(5)])
}

// TestFloorReservesEachSearchItsPart: searches that start one after the
// other, before any of them reports, start at parts of the range that do
// not overlap, each as many grid slots as it asks for; what they take
// moves the part after them; a short search, a rewind, and a search from
// the start of the range that finds slots behind them start them again
// from what was taken.
func TestFloorReservesEachSearchItsPart(t *testing.T) {
	grid, err := slot.NewSeries("report", mustInterval("PT1M"), time.UTC, time.Time{})
	require.NoError(t, err)
	at := func(i int) time.Time { return time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC) }
	took := func(from, to int) []Slot {
		var out []Slot
		for i := from; i < to; i++ {
			out = append(out, Slot{Slot: slot.Slot{Start: at(i), End: at(i + 1)}})
		}
		return out
	}
	f := newFloor(false, grid)
	f.every = time.Hour
	requireStart := func(n int, want time.Time) uint64 {
		t.Helper()
		lo, epoch := f.start(n)
		require.True(t, lo.Equal(want), "start %s, want %s", lo, want)
		return epoch
	}

	e := requireStart(10, time.Time{}) // nothing known: from the start of the range
	f.advance(e, time.Time{}, took(0, 10), true, false)
	e1 := requireStart(10, at(10))
	e2 := requireStart(10, at(20))
	e3 := requireStart(5, at(30))
	requireStart(1, at(35))
	f.advance(e2, at(20), took(20, 30), false, false)
	f.advance(e1, at(10), took(10, 20), false, false)
	requireStart(1, at(36))

	// Taken beyond its part (slots after 30 were missing): the next search
	// starts after what it took.
	f.advance(e3, at(30), took(40, 45), false, false)
	requireStart(10, at(45))

	// Short: nothing acquirable after where it started. The next search
	// starts at the earliest slot the last search took.
	e = requireStart(10, at(55))
	f.advance(e, at(55), took(55, 58), false, true)
	requireStart(10, at(55))

	// A search from the start of the range that finds slots behind the
	// reserved parts: the searches after it go on from there.
	f.rewind()
	e = requireStart(10, time.Time{})
	f.advance(e, time.Time{}, took(3, 13), true, false)
	requireStart(10, at(13))

	// Expired leases taken over say nothing of where acquirable slots are,
	// and take the places of AVAILABLE slots in the search: one that took
	// over 10 leases saw no acquirable slot, and the next search starts
	// where it started.
	e = requireStart(10, at(23))
	over := took(100, 110)
	for i := range over {
		over[i].TookOver = true
	}
	f.advance(e, at(23), over, false, false)
	e = requireStart(10, at(23))
	// One that took over 4 and took 6 AVAILABLE slots saw the acquirable
	// slots up to the end of those 6.
	f.advance(e, at(23), append(took(23, 29), over[:4]...), false, false)
	requireStart(10, at(29))
}

// TestConcurrentSearchesStepOverNoLockedSlots: a locked-mode batch that
// starts while another holds its slots reads the index entries of its own
// slots, not of the other's too, and takes the next slots in order.
func TestConcurrentSearchesStepOverNoLockedSlots(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 1_000)
	f.exec(`VACUUM ANALYZE {{schema}}.slot`)
	pool := pgtest.OwnPool(t, f.db.URL, 4, "")
	q := f.queueOn(pool, Options{})
	q.floor.every = time.Hour

	release := holdBatch(q, 100)
	index := f.schema + ".slot_available_idx"
	before := pgtest.EntriesRead(t, pool, index)
	second, err := q.RunBatch(ctx, 100, noop)
	require.NoError(t, err)
	read := pgtest.EntriesRead(t, pool, index) - before
	held, err := release()

	require.NoError(t, err)
	require.Len(t, held, 100)
	require.Len(t, second, 100)
	for i, r := range second {
		require.True(t, r.Slot.Start.Equal(f.slotStart(100+i)), "slot %d of the second batch is %s", i, r.Slot.Start)
	}
	t.Logf("the second batch read %d entries of slot_available_idx", read)
	require.Less(t, read, int64(150), "entries read by a batch of 100 while another held 100")
}

// TestFloorStaysInTheRange: a part reserved by a search still running can
// run past the end of the queue's range; the next search, starting after
// it, looks at the range and nothing beyond.
func TestFloorStaysInTheRange(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 40)
	q := f.queue(Options{To: f.slotStart(20), Policy: Policy{LeaseTTL: time.Hour}})
	q.floor.every = time.Hour
	leases, err := q.Claim(ctx, 15) // 0-14
	require.NoError(t, err)
	require.Len(t, leases, 15)
	q.floor.start(15) // a search in flight reserves 15-29
	leases, err = q.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, leases, 5)
	for i, l := range leases {
		require.True(t, l.Start.Equal(f.slotStart(15+i)), "lease %d is %s", i, l.Start)
	}
}

// TestAbandonedReservationIsFound: a search that reserved its part of the
// range and never ran (its connection failed) leaves the part behind the
// searches after it; the next search from the start of the range takes
// it, and the searches after that go on from there.
func TestAbandonedReservationIsFound(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 40)
	q := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}})
	q.floor.every = time.Hour
	claimFrom := func(n, first int) {
		t.Helper()
		leases, err := q.Claim(ctx, n)
		require.NoError(t, err)
		require.Len(t, leases, n)
		for i, l := range leases {
			require.True(t, l.Start.Equal(f.slotStart(first+i)), "lease %d is %s, want slot %d", i, l.Start, first+i)
		}
	}
	claimFrom(10, 0)
	q.floor.start(10) // reserves 10-19, then fails
	claimFrom(5, 20)
	q.floor.every = 0 // the periodic search from the start of the range is due
	claimFrom(10, 10)
	q.floor.every = time.Hour
	claimFrom(5, 25)
}

// TestTakeoverKeepsTheOrder: a claim that takes an expired lease over takes
// fewer AVAILABLE slots than it reserved a part of the range for; the next
// claim still takes the oldest AVAILABLE slot, not the one after the part
// reserved. Before, the slot skipped waited for the next search from the
// start of the range (up to a second).
func TestTakeoverKeepsTheOrder(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 20)
	q := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour, TakeoverGrace: -1}})
	q.floor.every = time.Hour // no periodic search from the start of the range
	other := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}})
	claimed := func(n int, want ...int) {
		t.Helper()
		leases, err := q.Claim(ctx, n)
		require.NoError(t, err)
		var got []int
		for _, l := range leases {
			got = append(got, int(l.Start.Sub(f.from)/time.Minute))
		}
		require.ElementsMatch(t, want, got, "slots claimed")
	}
	dead, err := other.Claim(ctx, 3) // 0-2, by a holder that dies
	require.NoError(t, err)
	require.Len(t, dead, 3)
	claimed(1, 3)

	f.expire(dead[0].Start)
	claimed(1, 0) // the expired lease, in the place reserved for 4
	claimed(1, 4)

	f.expire(dead[1].Start)
	f.expire(dead[2].Start)
	claimed(3, 1, 2, 5) // two expired leases, and one of the 3 places reserved
	claimed(2, 6, 7)
}
