package acquire

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
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
			held, err := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}}).Claim(ctx, 1_000)
			require.NoError(t, err)
			require.Len(t, held, 1_000)
			if analyzed == "after" {
				f.exec(`VACUUM ANALYZE {{schema}}.slot`)
			}

			pool := pgtest.OwnPool(t, f.db.URL, 3, "force_generic_plan") // 3: the fewest a queue takes
			q := f.queueOn(pool, Options{Policy: Policy{LeaseTTL: time.Hour}})

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
				q := f.queueOn(pool, Options{Policy: Policy{LeaseTTL: time.Hour, NewestFirst: newest}})

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

// TestLeaseListsScaleWithLeases: the statements that take or are given
// many slots at once must do work in proportion to the slots, not to
// their square nor to the series. With 2,000 leases of a 50,000-slot
// series held, each runs with custom and generic plans, with and without
// statistics: a claim of 2,000 more, a claim taking the 2,000 over once
// they expired, their heartbeat, their completion, the check of which
// completions landed, and the release of orphaned leases (here none, all
// 2,000 being live). The rows through their plans are counted
// (pgtest.PlanWork), fewer than 20 per lease, which is fewer than the
// series holds; and no plan may test each row against the whole list,
// which no row count shows (PlanWork fails the test for that too).
//
// Before: the heartbeat told the leases it extended from the busy ones by
// joining the two, a nested loop over both (8,018,000 rows through the
// plan); without statistics the heartbeat and the completion read the
// whole series (see listed); the lease guard looked each row's fence up in
// the list (array_position); a claim and a takeover tested each row they
// updated against the array of all their rows' addresses; landed joined
// the list in a nested loop; and the release of orphans tested each lease
// against the list of live ones (<> ALL).
func TestLeaseListsScaleWithLeases(t *testing.T) {
	const leases, slots = 2_000, 50_000
	for _, analyzed := range []bool{false, true} {
		ctx := context.Background()
		f := newFixture(t, slots)
		q := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}})
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
		lease := []any{q.name, q.interval, starts, q.opts.Owner, fences}
		claim := []any{q.name, q.interval, leases, q.from, q.to, q.opts.Owner, q.opts.LeaseTTL.Microseconds(), q.opts.Lag.Microseconds(),
			q.opts.TakeoverGrace.Microseconds(), q.from, q.to}
		for _, st := range []struct {
			name, before, sql string
			args              []any
		}{
			{"claim", "", q.sql.claim[controls{}.variant()], claim},
			{"takeover", `UPDATE {{schema}}.slot SET lease_until = now() - interval '1 day' WHERE status = 'ACQUIRED'`, q.sql.claim[controls{}.variant()], claim},
			{"extend", "", q.sql.extend, append(lease, q.opts.LeaseTTL.Microseconds())},
			{"complete", "", q.sql.completeMany, lease},
			{"landed", `UPDATE {{schema}}.slot SET status = 'COMPLETE', owner = NULL, lease_until = NULL WHERE status = 'ACQUIRED'`,
				q.sql.landed, []any{q.name, q.interval, starts, fences, statusComplete}},
			{"release orphans", "", q.sql.releaseOrphans, []any{q.name, q.interval, q.opts.Owner, fences}},
		} {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				t.Run(fmt.Sprintf("analyzed=%v/%s/%s", analyzed, st.name, mode), func(t *testing.T) {
					tx, err := f.db.Pool.Begin(ctx)
					require.NoError(t, err)
					defer func() { require.NoError(t, tx.Rollback(ctx)) }()
					if st.before != "" {
						_, err := tx.Exec(ctx, sqlschema.Render(st.before, f.schema))
						require.NoError(t, err)
					}
					work := pgtest.PlanWork(t, tx, mode, st.sql, listTestedPerRow(analyzed, mode, st.args)...)
					t.Logf("%d rows through the plan for %d leases", work, leases)
					require.Less(t, work, int64(20*leases), "rows through the plan of %s of %d leases in a series of %d slots", st.name, leases, slots)
				})
			}
		}
	}
}

// TestLockedBatchScalesWithSlots: the write of a locked-mode batch's
// outcomes must do work in proportion to the batch. It runs for 2,000
// outcomes (four times the most finish sends at once) with custom and
// generic plans, with and without statistics, and counts the rows through
// its plan as TestLeaseListsScaleWithLeases does. Joined with its arrays
// unnested, the statement ran in a generic plan as a nested loop that read
// every outcome for every row: 3,998,000 rows, and 0.9 s.
func TestLockedBatchScalesWithSlots(t *testing.T) {
	const batch, slots = 2_000, 50_000
	for _, analyzed := range []bool{false, true} {
		ctx := context.Background()
		f := newFixture(t, slots)
		if analyzed {
			f.exec(`VACUUM ANALYZE {{schema}}.slot`)
		}
		q := f.queue(Options{})
		var (
			starts             []time.Time
			statuses           []string
			fences             []int64
			attempts, failures []int
			messages, data     []*string
			delays             []*int64
		)
		for i := range batch {
			starts = append(starts, f.slotStart(i))
			statuses = append(statuses, "COMPLETE")
			fences, attempts, failures = append(fences, int64(i+1)), append(attempts, 1), append(failures, 0)
			messages, data, delays = append(messages, nil), append(data, nil), append(delays, nil)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(fmt.Sprintf("analyzed=%v/%s", analyzed, mode), func(t *testing.T) {
				tx, err := f.db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { require.NoError(t, tx.Rollback(ctx)) }()
				work := pgtest.PlanWork(t, tx, mode, q.sql.finishLocked, listTestedPerRow(analyzed, mode, []any{q.name, q.interval, starts,
					statuses, fences, attempts, failures, messages, delays, data, q.opts.Owner})...)
				t.Logf("%d rows through the plan for %d outcomes", work, batch)
				require.Less(t, work, int64(20*batch), "rows through the plan of the outcomes of a batch of %d in a series of %d slots", batch, slots)
				var done int
				require.NoError(t, tx.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`, f.schema)).Scan(&done))
				require.Equal(t, batch, done, "outcomes written")
			})
		}
	}
}

// listTestedPerRow marks the list of slots among args (see listed) as one
// the plan may test each row against (pgtest.PerRow) in the one case where
// it does: a generic plan for a series without statistics. The planner
// then believes the series holds a row or two, bounds the scan by the
// list's first and last starts, and tests each row it reads against the
// list, a pass over the list per row. Measured, heartbeat and completion
// without statistics against with: 21 and 15 ms for 2,000 leases, about
// as with statistics; 0.40 and 0.35 s for 16,000, against 0.18 and 0.11.
func listTestedPerRow(analyzed bool, mode string, args []any) []any {
	if analyzed || mode != "force_generic_plan" {
		return args
	}
	out := slices.Clone(args)
	for i, a := range out {
		if list, ok := a.([]time.Time); ok {
			out[i] = pgtest.PerRow{Array: list}
		}
	}
	return out
}

// TestPlainClaimIsNotCompiled: over a series of 200,000 AVAILABLE slots
// without controls, the plans of the claim statements made for their own
// arguments (every claim without named prepared statements, as behind a
// pooler, and the first five of a prepared statement) cost less than
// PostgreSQL's default jit_above_cost, in both orders: they are not
// compiled to machine code, which takes longer than the claim. When the
// statements tested each slot against the upstream series, whether the
// series had any or not, the planner counted an index probe per slot for
// it and each of these plans was compiled (see candidates).
func TestPlainClaimIsNotCompiled(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 200_000)
	f.exec(`VACUUM ANALYZE {{schema}}.slot`)
	var limit float64
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT boot_val::float8 FROM pg_settings WHERE name = 'jit_above_cost'`).Scan(&limit))
	plain := controls{}.variant()
	for _, newest := range []bool{false, true} {
		q := f.queue(Options{Policy: Policy{NewestFirst: newest}})
		for _, st := range []struct {
			name, sql string
			args      []any
		}{
			{"claim", q.sql.claim[plain], []any{q.name, q.interval, 100, q.from, q.to, q.opts.Owner, q.opts.LeaseTTL.Microseconds(),
				q.opts.Lag.Microseconds(), q.opts.TakeoverGrace.Microseconds(), q.from, q.to}},
			{"select locked", q.sql.selectLocked[plain], []any{q.name, q.interval, 100, q.from, q.to, q.opts.Lag.Microseconds(),
				q.opts.TakeoverGrace.Microseconds(), q.from, q.to}},
		} {
			t.Run(fmt.Sprintf("%s/newest=%v", st.name, newest), func(t *testing.T) {
				tx, err := f.db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { require.NoError(t, tx.Rollback(ctx)) }()
				cost := pgtest.PlanCost(t, tx, "force_custom_plan", st.sql, st.args...)
				t.Logf("estimated cost %.0f", cost)
				require.Less(t, cost, limit, "estimated cost of a custom plan of %s, against jit_above_cost", st.name)
			})
		}
	}
}
