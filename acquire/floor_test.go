package acquire

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
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
	q := f.queueOn(pool, Options{LeaseTTL: time.Hour})
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
	q := f.queue(Options{LeaseTTL: time.Hour})
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
