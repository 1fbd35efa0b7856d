package almanac

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestDrainCountsOnlyOpenSlots: what a drain has left to do is counted
// from the open slots, not from every slot of its range. A series of
// 20,000 finished slots and 10 open ones (3 ready, 3 in backoff, 4 leased)
// is counted five times, with generic plans and with fresh ones; the
// server's statistics count the slot table's rows read.
func TestDrainCountsOnlyOpenSlots(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	grid := series(t, "drain", "PT1M")
	_, _, err := seriesdb.Add(ctx, db.Pool, db.Schema, grid)
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	exec := func(sql string, args ...any) {
		_, err := db.Pool.Exec(ctx, sqlschema.Render(sql, db.Schema), args...)
		require.NoError(t, err)
	}
	exec(`INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status)
		SELECT 'drain', 'PT1M', s, s + interval '1 minute', CASE WHEN k < 20000 THEN 'COMPLETE' ELSE 'AVAILABLE' END
		FROM generate_series(0, 20009) AS k, LATERAL (SELECT $1::timestamptz + k * interval '1 minute' AS s) t`, from)
	exec(`UPDATE {{schema}}.slot SET not_before = now() + interval '1 hour' WHERE slot_start >= $1 AND slot_start < $2`,
		from.Add(20003*time.Minute), from.Add(20006*time.Minute))
	exec(`UPDATE {{schema}}.slot SET status = 'ACQUIRED', owner = gen_random_uuid(), lease_until = now() + interval '1 hour'
		WHERE slot_start >= $1`, from.Add(20006*time.Minute))
	exec(`VACUUM ANALYZE {{schema}}.slot`)

	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		t.Run(mode, func(t *testing.T) {
			pool := pgtest.OwnPool(t, db.URL, 1, mode)
			e := newEngine(pool, Options{Schema: db.Schema}, nil)
			scopes := []scope{{job: &job{Job: Job{Series: grid}}, from: from, to: from.Add(30000 * time.Minute)}}

			before := pgtest.RowsRead(t, pool, db.Schema+".slot")
			const counts = 5
			for range counts {
				st, err := e.scopesState(ctx, scopes)
				require.NoError(t, err)
				require.Equal(t, scopeState{ready: 3, backoff: 3, held: 4, next: st.next}, st)
				require.Greater(t, st.next, 50*time.Minute, "the first lease runs out in an hour")
			}
			n := pgtest.RowsRead(t, pool, db.Schema+".slot") - before
			t.Logf("%d rows read", n)
			require.Less(t, n, int64(counts*100), "rows of the slot table read to count 10 open slots among 20,010, %d times", counts)
		})
	}
}

// TestIncompleteErrorGrammar: the counts agree with their nouns.
func TestIncompleteErrorGrammar(t *testing.T) {
	require.Equal(t, "1 slot left unfinished: 1 parked after its last attempt", (&IncompleteError{Parked: 1}).Error())
	require.Equal(t, "4 slots left unfinished: 1 failed or snoozed, waiting for its retry, 2 parked after their last attempt, 1 held by another worker",
		(&IncompleteError{Failed: 1, Parked: 2, Held: 1}).Error())
	require.Equal(t, "2 slots left unfinished: 2 not run yet (stopped: context canceled)",
		(&IncompleteError{Ready: 2, Cause: context.Canceled}).Error())
}
