package almanac_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestCompactedSlotsNeverRunAgain: in every mode, a job whose finished
// history was compacted away never runs a compacted slot again (the
// scheduler re-materializes the job's range on every drain), still counts
// it as done, and runs exactly the slots a re-open brings back, once.
func TestCompactedSlotsNeverRunAgain(t *testing.T) {
	for _, mode := range []string{"locked", "batch", "lease"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.New(t)
			c, err := almanac.New(db.Pool, almanac.Options{Schema: db.Schema, ChunkSize: 7})
			require.NoError(t, err)
			s, err := c.Series(ctx, "retained", "PT1H", almanac.SeriesOptions{TimeZone: "Europe/Berlin"})
			require.NoError(t, err)
			from := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) // across the DST change
			to := from.Add(24 * time.Hour)
			var mu sync.Mutex
			runs := map[time.Time]int{}
			ran := func(start time.Time) {
				mu.Lock()
				runs[start.UTC()]++
				mu.Unlock()
			}
			job := almanac.Job{Series: s, From: from, To: to,
				Handler: func(_ context.Context, _ pgx.Tx, sl almanac.Slot) error { ran(sl.Start); return nil }}
			switch mode {
			case "batch":
				job.Batch = 5
			case "lease":
				job.Handler = nil
				job.LeaseHandler = func(ctx context.Context, l *almanac.Lease) error {
					ran(l.Start)
					_, _, err := l.Finish(ctx, nil)
					return err
				}
			}
			require.NoError(t, c.Register(job))
			summary, err := c.Drain(ctx)
			require.NoError(t, err)
			require.Equal(t, 24, summary.Completed)

			res, err := c.Compact(ctx, from.Add(12*time.Hour), almanac.WriteOptions{})
			require.NoError(t, err)
			require.Equal(t, almanac.WriteResult{Changed: 12, Ranges: 1}, res)
			// Whatever materializes the range again finds nothing to insert.
			m, err := c.Materialize(ctx, s, from, to, almanac.WriteOptions{})
			require.NoError(t, err)
			require.Zero(t, m.Inserted)
			summary, err = c.Drain(ctx)
			require.NoError(t, err, "compacted slots count as done")
			require.Zero(t, summary.Completed)
			st, err := c.Status(ctx, s, from, to)
			require.NoError(t, err)
			require.EqualValues(t, 24, st.Complete)
			require.Zero(t, st.Missing)

			// Everything compacted; a re-open brings three back.
			_, err = c.Compact(ctx, to, almanac.WriteOptions{}, s)
			require.NoError(t, err)
			var rows int
			require.NoError(t, db.Pool.QueryRow(ctx, sqlschema.Render(`SELECT count(*) FROM {{schema}}.slot`, db.Schema)).Scan(&rows))
			require.Zero(t, rows)
			ro, err := c.Reopen(ctx, s, from.Add(10*time.Hour), from.Add(13*time.Hour), almanac.WriteOptions{Reason: "late data"})
			require.NoError(t, err)
			require.EqualValues(t, 3, ro.Changed)
			summary, err = c.Drain(ctx)
			require.NoError(t, err)
			require.Equal(t, 3, summary.Completed)
			for i := range 24 {
				want := 1
				if i >= 10 && i < 13 {
					want = 2
				}
				require.Equal(t, want, runs[from.Add(time.Duration(i)*time.Hour)], "slot %d", i)
			}
		})
	}
}
