package acquire

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/wake"
)

// event is a slot_history row (an event of slot_event, or a completion
// recorded on the slot's row) as the tests compare it.
type event struct {
	Minute     int
	Event      string
	Generation int64
	Owner      string
	Fence      int64
	Attempt    int
	Message    string
}

// events returns the history of the fixture's series in time order.
func (f *fixture) events() []event {
	f.t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), sqlschema.Render(`SELECT extract(minute FROM slot_start)::int, event, generation,
		coalesce(owner::text, ''), coalesce(fence, 0), coalesce(attempt, 0), coalesce(message, '')
		FROM {{schema}}.slot_history WHERE name = 'report' AND "interval" = 'PT1M' ORDER BY at, slot_start`, f.schema))
	require.NoError(f.t, err)
	var out []event
	var e event
	_, err = pgx.ForEachRow(rows, []any{&e.Minute, &e.Event, &e.Generation, &e.Owner, &e.Fence, &e.Attempt, &e.Message},
		func() error { out = append(out, e); return nil })
	require.NoError(f.t, err)
	return out
}

// TestLockedOutcomesAreRecorded: a locked batch records one event per
// outcome, with the run's owner, fence, attempt and generation, in the
// statement that writes the outcomes; abandoned slots record nothing.
func TestLockedOutcomesAreRecorded(t *testing.T) {
	f := newFixture(t, 5)
	ctx := context.Background()
	fatal := errors.New("fatal")
	q := f.queue(Options{Policy: Policy{Retry: func(_ int, err error) (time.Duration, bool) { return time.Hour, !errors.Is(err, fatal) }}})
	results, err := q.RunBatch(ctx, 5, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		require.Equal(t, int64(1), s.Generation)
		switch s.Start.Minute() {
		case 0:
			return nil
		case 1:
			return Skip("holiday")
		case 2:
			return Snooze(time.Hour)
		case 3:
			return errors.New("remote said no")
		default:
			return fatal
		}
	})
	require.NoError(t, err)
	owner := q.Owner().String()
	fence := func(i int) int64 { return results[i].Slot.Fence }
	require.ElementsMatch(t, []event{
		{0, "completed", 1, owner, fence(0), 1, ""},
		{1, "skipped", 1, owner, fence(1), 1, "holiday"},
		{2, "snoozed", 1, owner, fence(2), 1, ""},
		{3, "failed", 1, owner, fence(3), 1, "remote said no"},
		{4, "parked", 1, owner, fence(4), 1, "gave up after 1 failure: fatal"},
	}, f.events())
}

// TestLeaseOutcomesAreRecorded: every final lease write records its
// outcome; claims, extensions and checkpoints record nothing, and a stale
// holder's refused write records nothing either.
func TestLeaseOutcomesAreRecorded(t *testing.T) {
	f := newFixture(t, 7)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{Retry: fixedRetry(time.Hour)}})
	leases, err := q.Claim(ctx, 7)
	require.NoError(t, err)
	require.Len(t, leases, 7)
	require.Empty(t, f.events(), "a claim is not an event")
	require.NoError(t, leases[0].Complete(ctx))
	_, _, err = leases[1].Fail(ctx, errors.New("upstream 503"))
	require.NoError(t, err)
	require.NoError(t, leases[2].Skip(ctx, "nothing to do"))
	require.NoError(t, leases[3].Checkpoint(ctx, map[string]int{"page": 7}))
	require.NoError(t, leases[3].Extend(ctx))
	require.NoError(t, leases[3].Snooze(ctx, time.Minute, nil))
	require.NoError(t, leases[4].Release(ctx))
	lost, err := q.CompleteMany(ctx, leases[5:6])
	require.NoError(t, err)
	require.Empty(t, lost)
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, leases[6].CompleteTx(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, leases[0].Complete(ctx), ErrLeaseLost)

	owner := q.Owner().String()
	fence := func(i int) int64 { return leases[i].Fence }
	require.ElementsMatch(t, []event{
		{0, "completed", 1, owner, fence(0), 1, ""},
		{1, "failed", 1, owner, fence(1), 1, "upstream 503"},
		{2, "skipped", 1, owner, fence(2), 1, "nothing to do"},
		{3, "snoozed", 1, owner, fence(3), 1, ""},
		{4, "released", 1, owner, fence(4), 1, ""},
		{5, "completed", 1, owner, fence(5), 1, ""},
		{6, "completed", 1, owner, fence(6), 1, ""},
	}, f.events(), "CompleteTx in the caller's transaction is recorded once, as the worker's")
}

// TestTakeoversAreRecorded: a lease taken over after it expired (by lease
// or locked mode) and an ejected lease each record the run that lost the
// slot, before the new run's outcome.
func TestTakeoversAreRecorded(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	first := f.queue(Options{})
	leases, err := first.Claim(ctx, 3)
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET lease_until = clock_timestamp() - interval '1 second' WHERE slot_start < $1`, f.slotStart(2))

	second := f.queue(Options{Policy: Policy{TakeoverGrace: -1}})
	taken, err := second.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.True(t, taken[0].TookOver)
	require.NoError(t, taken[0].Complete(ctx))

	var locked Slot
	_, ok, err := second.Run(ctx, func(_ context.Context, _ pgx.Tx, s Slot) error { locked = s; return nil })
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, locked.TookOver)

	ejected, err := second.Eject(ctx, f.slotStart(2))
	require.NoError(t, err)
	require.ErrorIs(t, leases[2].Complete(ctx), ErrLeaseLost)
	require.NoError(t, ejected.Complete(ctx))

	o1, o2 := first.Owner().String(), second.Owner().String()
	require.Equal(t, []event{
		{taken[0].Start.Minute(), "taken_over", 1, o1, leases[taken[0].Start.Minute()].Fence, 1,
			fmt.Sprintf("lease expired; taken over by %s with fence %d", o2, taken[0].Fence)},
		{taken[0].Start.Minute(), "completed", 1, o2, taken[0].Fence, 2, ""},
		{locked.Start.Minute(), "taken_over", 1, o1, leases[locked.Start.Minute()].Fence, 1, "lease expired; taken over by a locked-mode worker"},
		{locked.Start.Minute(), "completed", 1, o2, locked.Fence, 2, ""},
		{2, "ejected", 1, o1, leases[2].Fence, 1, fmt.Sprintf("ejected by %s with fence %d", o2, ejected.Fence)},
		{2, "completed", 1, o2, ejected.Fence, 2, ""},
	}, f.events())
}

// TestGenerationAfterReopen: a slot re-opened by a plain SQL UPDATE is a
// new computation: generation 2, attempt 1 again, a new computation key
// and the same slot key.
func TestGenerationAfterReopen(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	q := f.queue(Options{})
	var keys []string
	var gens []int64
	var attempts []int
	for range 2 {
		_, ok, err := q.Run(ctx, func(_ context.Context, _ pgx.Tx, s Slot) error {
			keys = append(keys, s.Key(), s.ComputationKey())
			gens, attempts = append(gens, s.Generation), append(attempts, s.Attempt)
			return nil
		})
		require.NoError(t, err)
		require.True(t, ok)
		f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late data'`)
	}
	require.Equal(t, []int64{1, 2}, gens)
	require.Equal(t, []int{1, 1}, attempts)
	require.Equal(t, []string{
		"report 2026-01-01T00:00:00Z/PT1M", "report 2026-01-01T00:00:00Z/PT1M 1",
		"report 2026-01-01T00:00:00Z/PT1M", "report 2026-01-01T00:00:00Z/PT1M 2",
	}, keys)

	leases, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, int64(3), leases[0].Generation)
	require.Equal(t, 1, leases[0].Attempt)
}

// TestEngineWritesSkipTheTriggers: the engine's own writes that make slots
// acquirable (a release, a failure, a snooze) neither wake workers through
// the plain-SQL trigger nor record changed_by_sql events. A notification
// sent after them arrives first, so none of them notified.
func TestEngineWritesSkipTheTriggers(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	conn, err := f.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	channel := wake.Channel(f.schema)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	defer conn.Exec(context.Background(), "UNLISTEN *") //nolint:errcheck

	q := f.queue(Options{Policy: Policy{Retry: fixedRetry(0)}})
	leases, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, leases[0].Release(ctx))
	_, _, err = leases[1].Fail(ctx, errors.New("again"))
	require.NoError(t, err)
	require.NoError(t, leases[2].Snooze(ctx, 0, nil))
	_, err = q.RunBatch(ctx, 3, func(context.Context, pgx.Tx, Slot) error { return errors.New("once more") })
	require.NoError(t, err)

	require.NoError(t, wake.Notify(ctx, f.db.Pool, f.schema, wake.Event{Name: "sentinel"}))
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	ev, err := wake.Parse(n.Payload)
	require.NoError(t, err)
	require.Equal(t, "sentinel", ev.Name, "the engine's writes sent nothing")
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.slot_event WHERE event = 'changed_by_sql'`))
}

// TestBatchTakeoversAreRecorded: a locked batch that takes expired leases
// over records the lost run of each, with its owner and fence.
func TestBatchTakeoversAreRecorded(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	first := f.queue(Options{})
	leases, err := first.Claim(ctx, 2)
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET lease_until = clock_timestamp() - interval '1 second' WHERE status = 'ACQUIRED'`)
	second := f.queue(Options{Policy: Policy{TakeoverGrace: -1}})
	results, err := second.RunBatch(ctx, 3, func(context.Context, pgx.Tx, Slot) error { return nil })
	require.NoError(t, err)
	require.Len(t, results, 3)
	o1, o2 := first.Owner().String(), second.Owner().String()
	var want []event
	for i, r := range results {
		m := r.Slot.Start.Minute()
		if i < 2 {
			require.True(t, r.Slot.TookOver)
			want = append(want, event{m, "taken_over", 1, o1, leases[m].Fence, 1, "lease expired; taken over by a locked-mode worker"},
				event{m, "completed", 1, o2, r.Slot.Fence, 2, ""})
		} else {
			want = append(want, event{m, "completed", 1, o2, r.Slot.Fence, 1, ""})
		}
	}
	require.ElementsMatch(t, want, f.events())
}

// TestCompletionsLiveOnTheRow: a completion writes no history row; the
// slot's row records it (slot_history shows it as an event), and a re-open
// by plain SQL moves it into its own 'reopened' row, so a re-computation
// costs one history row, not two.
func TestCompletionsLiveOnTheRow(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	q := f.queue(Options{})
	owner := q.opts.Owner.String()
	results, err := q.RunBatch(ctx, 2, noop)
	require.NoError(t, err)
	require.Len(t, results, 2)
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.slot_event`), "completions write no history rows")
	first := event{0, "completed", 1, owner, results[0].Slot.Fence, 1, ""}
	require.Equal(t, []event{first, {1, "completed", 1, owner, results[1].Slot.Fence, 1, ""}}, f.events())

	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', message = 'late data' WHERE slot_start = $1`, f.slotStart(0))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot_event`), "one row per re-computation")
	leases, err := q.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.NoError(t, leases[0].Complete(ctx))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot_event`))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE completed_by IS NOT NULL AND slot_start = $1`, f.slotStart(0)))

	var slot0 []event
	for _, e := range f.events() {
		if e.Minute == 0 {
			slot0 = append(slot0, e)
		}
	}
	require.Equal(t, []event{
		first,
		{0, "reopened", 2, "", 0, 0, "late data"},
		{0, "completed", 2, owner, leases[0].Fence, 1, ""},
	}, slot0)
}
