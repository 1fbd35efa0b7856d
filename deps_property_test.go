package almanac_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestDependenciesProperty: random graphs of 2 to 4 series (random
// intervals and zones, edges only from earlier to later series, so no
// cycle), materialized over two days with random holes upstream, drained,
// then re-opened at random through the API and plain SQL and drained
// again. Once quiet, every COMPLETE downstream slot has every upstream
// slot of the upstream's grid that overlaps it present and COMPLETE or
// SKIP: checked slot by slot on the grids, not with upstream_done.
func TestDependenciesProperty(t *testing.T) {
	intervals := []string{"PT30M", "PT1H", "PT3H", "P1D"}
	zones := []string{"UTC", "Europe/Berlin", "America/New_York"}
	for seed := range 4 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(seed), 38))
			db := pgtest.New(t)
			c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
			require.NoError(t, err)
			n := 2 + rng.IntN(3)
			var series []almanac.Series
			ups := map[int][]int{}
			for i := range n {
				var after []almanac.Series
				for j := range i {
					if rng.IntN(2) == 0 || j == i-1 && len(after) == 0 {
						after = append(after, series[j])
						ups[i] = append(ups[i], j)
					}
				}
				s, err := c.Series(ctx, fmt.Sprintf("s%d", i), intervals[rng.IntN(len(intervals))],
					almanac.SeriesOptions{TimeZone: zones[rng.IntN(len(zones))], After: after})
				require.NoError(t, err)
				series = append(series, s)
			}
			from := time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC) // across a DST change
			to := from.Add(48 * time.Hour)
			exec := func(sql string, args ...any) {
				t.Helper()
				_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
				require.NoError(t, err)
			}
			for i, s := range series {
				_, err := c.Materialize(ctx, s, from, to, almanac.WriteOptions{})
				require.NoError(t, err)
				if i < n-1 && rng.IntN(2) == 0 {
					exec(`DELETE FROM {{schema}}.slot WHERE name = $1 AND slot_start >= $2 AND slot_start < $3`, s.Name(),
						from.Add(time.Duration(rng.IntN(40))*time.Hour), from.Add(time.Duration(40+rng.IntN(8))*time.Hour))
				}
			}
			drain := func() {
				t.Helper()
				d, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema})
				require.NoError(t, err)
				for _, s := range series {
					require.NoError(t, d.Register(almanac.Job{Series: s, From: from.Add(-24 * time.Hour), To: to.Add(24 * time.Hour),
						Handler: func(context.Context, pgx.Tx, almanac.Slot) error { return nil }}))
				}
				for range n {
					_, _ = d.Drain(ctx)
				}
			}
			check := func(what string) {
				t.Helper()
				for i, s := range series {
					for _, j := range ups[i] {
						up := series[j]
						rows, err := db.Pool.Query(ctx, sqlschema.Render(`SELECT slot_start, slot_end FROM {{schema}}.slot
							WHERE name = $1 AND status = 'COMPLETE'`, db.Schema), s.Name())
						require.NoError(t, err)
						type span struct{ lo, hi time.Time }
						done, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (span, error) {
							var sp span
							return sp, r.Scan(&sp.lo, &sp.hi)
						})
						require.NoError(t, err)
						for _, d := range done {
							first, err := up.Floor(d.lo)
							require.NoError(t, err)
							for u := range up.Slots(first.Start, d.hi) {
								var status string
								err := db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT status FROM {{schema}}.slot
									WHERE name = $1 AND "interval" = $2 AND slot_start = $3`, db.Schema),
									up.Name(), up.Interval().String(), u.Start).Scan(&status)
								require.NoError(t, err, "%s: %s [%s, %s) is COMPLETE, upstream %s slot %s has no row",
									what, s, d.lo, d.hi, up, u.Start)
								require.Contains(t, []string{"COMPLETE", "SKIP"}, status, "%s: %s [%s, %s) is COMPLETE, upstream %s slot %s is %s",
									what, s, d.lo, d.hi, up, u.Start, status)
							}
						}
					}
				}
			}
			drain()
			check("after the first drain")
			for round := range 3 {
				s := series[rng.IntN(n-1)]
				lo := from.Add(time.Duration(rng.IntN(44)) * time.Hour)
				if rng.IntN(2) == 0 {
					_, err := c.Reopen(ctx, s, lo, lo.Add(time.Duration(1+rng.IntN(4))*time.Hour), almanac.WriteOptions{Reason: "late"})
					require.NoError(t, err)
				} else {
					exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late' WHERE name = $1
						AND status IN ('COMPLETE', 'SKIP') AND slot_start >= $2 AND slot_start < $3`, s.Name(), lo, lo.Add(3*time.Hour))
				}
				check(fmt.Sprintf("right after re-open %d", round))
				drain()
				check(fmt.Sprintf("after re-open %d and a drain", round))
			}
		})
	}
}
