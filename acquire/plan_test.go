package acquire

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestLeaseStatementsReadOnlyTheirSlots: claiming, extending and completing
// a few leases must not read the other leases of the series. Another worker
// holds 1,000 leases of a 20,000-slot series; each round here claims,
// extends and completes 10. The statements run with generic plans, the
// ones a long-lived connection ends up with, and the server's statistics
// count the rows read from the slot table's indexes and by sequential
// scans: before, a claim read every lease held to find the expired ones,
// and a completion hash-joined its list with all of them. The statistics
// are taken once after the leases were claimed, and once before, when no
// lease was held (the usual case after a vacuum: the leases come and go
// faster than the statistics are renewed); then slot_acquired_idx looks
// nearly empty, and a completion read every lease through it.
func TestLeaseStatementsReadOnlyTheirSlots(t *testing.T) {
	for _, analyzed := range []string{"after", "before"} {
		t.Run("statistics "+analyzed+" the leases", func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, 20_000)
			if analyzed == "before" {
				f.exec(`VACUUM ANALYZE {{schema}}.slot`)
			}
			held, err := f.queue(Options{LeaseTTL: time.Hour}).Claim(ctx, 1_000)
			require.NoError(t, err)
			require.Len(t, held, 1_000)
			if analyzed == "after" {
				f.exec(`VACUUM ANALYZE {{schema}}.slot`)
			}

			pool := pgtest.OwnPool(t, f.db.URL, 3, "force_generic_plan") // 3: the fewest a queue takes
			q := f.queueOn(pool, Options{LeaseTTL: time.Hour})

			round := func() {
				leases, err := q.Claim(ctx, 10)
				require.NoError(t, err)
				require.Len(t, leases, 10)
				lost, err := q.Extend(ctx, leases)
				require.NoError(t, err)
				require.Empty(t, lost)
				lost, err = q.CompleteMany(ctx, leases)
				require.NoError(t, err)
				require.Empty(t, lost)
			}
			round() // prepares the statements
			before := pgtest.RowsRead(t, pool, f.schema+".slot")
			const rounds = 5
			for range rounds {
				round()
			}
			// A round reads its own 10 slots a few times over (the claim, the
			// three parts of the heartbeat, the completion), never the 1,000
			// leases it does not hold.
			n := pgtest.RowsRead(t, pool, f.schema+".slot") - before
			t.Logf("%d rows read in %d rounds", n, rounds)
			require.Less(t, n, int64(rounds*200),
				"rows of the slot table read in %d rounds of claiming, extending and completing 10 leases while another worker holds 1,000", rounds)
		})
	}
}

// TestClaimsSkipFinishedSlots: a claim reads the acquirable slots, not the
// finished ones before them, even when the statistics say every slot of
// the series is AVAILABLE (taken before half of a backfill was done) and
// slot_available_idx has grown larger than the primary key (it takes an
// entry every time a slot becomes AVAILABLE again; a low fill factor makes
// it so here at once). Before migration 5 the claim was then served by the
// primary key with a status filter, and read the 10,000 finished slots on
// every claim. Both kinds of plan are tried: custom ones are what a
// connection uses first, and always behind a pooler. Live rows are
// counted: the finished slots' dead entries in slot_available_idx are
// stepped over, as often as the oldest transaction in the cluster keeps
// them from being marked dead.
func TestClaimsSkipFinishedSlots(t *testing.T) {
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, newest := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/newest=%v", mode, newest), func(t *testing.T) {
				ctx := context.Background()
				f := newFixture(t, 20_000)
				f.exec(`ALTER INDEX {{schema}}.slot_available_idx SET (fillfactor = 10)`)
				f.exec(`REINDEX INDEX {{schema}}.slot_available_idx`)
				f.exec(`VACUUM ANALYZE {{schema}}.slot`)
				finished, first := "slot_start < $1", 10_000 // the oldest half
				if newest {
					finished, first = "slot_start >= $1", 9_999
				}
				f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE', completed_at = now() WHERE `+finished, f.slotStart(10_000))

				pool := pgtest.OwnPool(t, f.db.URL, 3, mode) // 3: the fewest a queue takes
				q := f.queueOn(pool, Options{LeaseTTL: time.Hour, NewestFirst: newest})

				claim := func(i int) {
					leases, err := q.Claim(ctx, 10)
					require.NoError(t, err)
					require.Len(t, leases, 10)
					want := f.slotStart(first + 10*i)
					if newest {
						want = f.slotStart(first - 10*i)
					}
					require.True(t, leases[0].Start.Equal(want), "claim %d starts at %s, want %s", i, leases[0].Start, want)
				}
				claim(0)
				before := pgtest.RowsRead(t, pool, f.schema+".slot")
				const claims = 5
				for i := range claims {
					claim(1 + i)
				}
				n := pgtest.RowsRead(t, pool, f.schema+".slot") - before
				require.Less(t, n, int64(claims*100), "rows of the slot table read by %d claims of 10 slots beside 10,000 finished ones", claims)
			})
		}
	}
}

// TestLeaseListsScaleWithLeases: a heartbeat and a completion of many
// leases must do work in proportion to the leases, not to their square nor
// to the series. The heartbeat told the leases it extended from the busy
// ones by joining the two, and planned for a list of ten (a generic plan's
// guess) or on a series without statistics it ran that join as a nested
// loop over both: 8,018,000 rows through the plan for 2,000 leases, and
// 5.4 s for a heartbeat of 10,000. Without statistics both statements also
// read the whole series (see listed). The rows through their plans are
// counted (pgtest.PlanWork) for 2,000 leases of a 50,000-slot series, with
// custom and generic plans, with and without statistics: fewer than 20 per
// lease, which is fewer than the series holds.
func TestLeaseListsScaleWithLeases(t *testing.T) {
	const leases, slots = 2_000, 50_000
	for _, analyzed := range []bool{false, true} {
		ctx := context.Background()
		f := newFixture(t, slots)
		q := f.queue(Options{LeaseTTL: time.Hour})
		held, err := q.Claim(ctx, leases)
		require.NoError(t, err)
		require.Len(t, held, leases)
		if analyzed {
			f.exec(`VACUUM ANALYZE {{schema}}.slot`)
		}
		starts := make([]time.Time, len(held))
		fences := make([]int64, len(held))
		for i, l := range held {
			starts[i], fences[i] = l.Start, l.Fence
		}
		for _, st := range []struct {
			name, sql string
			args      []any
		}{
			{"extend", q.sql.extend, []any{q.name, q.interval, starts, q.opts.Owner, fences, q.opts.LeaseTTL.Microseconds()}},
			{"complete", q.sql.completeMany, []any{q.name, q.interval, starts, q.opts.Owner, fences}},
		} {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				t.Run(fmt.Sprintf("analyzed=%v/%s/%s", analyzed, st.name, mode), func(t *testing.T) {
					tx, err := f.db.Pool.Begin(ctx)
					require.NoError(t, err)
					defer func() { require.NoError(t, tx.Rollback(ctx)) }()
					work := pgtest.PlanWork(t, tx, mode, st.sql, st.args...)
					t.Logf("%d rows through the plan for %d leases", work, leases)
					require.Less(t, work, int64(20*leases), "rows through the plan of %s of %d leases in a series of %d slots", st.name, leases, slots)
				})
			}
		}
	}
}
