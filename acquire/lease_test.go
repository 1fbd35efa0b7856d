package acquire

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

func TestLeaseLifecycle(t *testing.T) {
	f := newFixture(t, 5)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{Retry: fixedRetry(time.Hour)}})
	leases, err := q.Claim(ctx, 5)
	require.NoError(t, err)
	require.Len(t, leases, 5)
	for i, l := range leases {
		require.True(t, l.Start.Equal(f.slotStart(i)), "claimed in slot order")
		require.Equal(t, 1, l.Attempt)
		require.False(t, l.TookOver)
		r := f.row(l.Start)
		require.Equal(t, "ACQUIRED", r.Status)
		require.Equal(t, q.Owner().String(), *r.Owner)
		require.Equal(t, l.Fence, r.Fence)
		require.WithinDuration(t, time.Now().Add(defaultLeaseTTL), l.Until(), 5*time.Second)
	}
	more, err := q.Claim(ctx, 5)
	require.NoError(t, err)
	require.Empty(t, more, "held slots are not claimed again")

	require.NoError(t, leases[0].Complete(ctx))
	require.Equal(t, "COMPLETE", f.row(f.slotStart(0)).Status)

	outcome, delay, err := leases[1].Fail(ctx, errors.New("upstream 503"))
	require.NoError(t, err)
	require.Equal(t, Failed, outcome)
	require.Equal(t, time.Hour, delay)
	r := f.row(f.slotStart(1))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Nil(t, r.Owner)
	require.Equal(t, 1, r.FailCount)
	require.Equal(t, "upstream 503", *r.Message)
	require.InDelta(t, time.Hour.Seconds(), r.FromNow.Seconds(), 5)

	require.NoError(t, leases[2].Skip(ctx, "nothing to do"))
	require.Equal(t, "SKIP", f.row(f.slotStart(2)).Status)

	require.NoError(t, leases[3].Checkpoint(ctx, map[string]int{"page": 7}))
	require.NoError(t, leases[3].Snooze(ctx, time.Minute, nil))
	r = f.row(f.slotStart(3))
	require.Equal(t, "AVAILABLE", r.Status)
	require.Zero(t, r.FailCount)
	require.JSONEq(t, `{"page":7}`, string(r.Data), "the checkpoint survives the snooze")
	require.InDelta(t, time.Minute.Seconds(), r.FromNow.Seconds(), 5)

	require.NoError(t, leases[4].Extend(ctx))
	require.NoError(t, leases[4].Release(ctx))
	again, err := q.Claim(ctx, 5)
	require.NoError(t, err)
	require.Len(t, again, 1, "only the released slot is acquirable now")
	require.True(t, again[0].Start.Equal(f.slotStart(4)))
	require.Equal(t, 2, again[0].Attempt)
	require.Greater(t, again[0].Fence, leases[4].Fence)

	// Every finished lease is now stale.
	for _, l := range leases {
		require.ErrorIs(t, l.Complete(ctx), ErrLeaseLost)
		select {
		case <-l.Lost():
		default:
			t.Fatal("a lost lease closes its Lost channel")
		}
	}
}

func TestLeaseExpiryAndTakeover(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	old := f.queue(Options{Policy: Policy{LeaseTTL: 200 * time.Millisecond}})
	leases, err := old.Claim(ctx, 1)
	require.NoError(t, err)
	stale := leases[0]
	require.NoError(t, stale.Checkpoint(ctx, "half done"))

	other := f.queue(Options{Policy: Policy{LeaseTTL: time.Minute, TakeoverGrace: -1}})
	none, err := other.Claim(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, none, "a live lease is not taken over")

	f.expire(stale.Start)
	taken, err := other.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	fresh := taken[0]
	require.True(t, fresh.TookOver)
	require.Greater(t, fresh.Fence, stale.Fence, "the fence strictly increases")
	require.Equal(t, 2, fresh.Attempt)
	require.JSONEq(t, `"half done"`, string(fresh.Data), "the checkpoint survives takeover")

	before := f.row(stale.Start)
	require.ErrorIs(t, stale.Extend(ctx), ErrLeaseLost)
	require.ErrorIs(t, stale.Complete(ctx), ErrLeaseLost)
	_, _, err = stale.Fail(ctx, errors.New("late"))
	require.ErrorIs(t, err, ErrLeaseLost)
	require.ErrorIs(t, stale.Checkpoint(ctx, "overwritten?"), ErrLeaseLost)
	require.ErrorIs(t, stale.Skip(ctx, "late"), ErrLeaseLost)
	require.ErrorIs(t, stale.Snooze(ctx, time.Second, nil), ErrLeaseLost)
	require.ErrorIs(t, stale.Release(ctx), ErrLeaseLost)
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, stale.CompleteTx(ctx, tx), ErrLeaseLost)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, before, f.row(stale.Start), "stale writes change nothing")

	require.NoError(t, fresh.Complete(ctx))
}

func TestLeaseCompleteTx(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	q := f.queue(Options{})
	leases, err := q.Claim(ctx, 2)
	require.NoError(t, err)

	// Completion and the caller's writes commit together...
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, leases[0].CompleteTx(ctx, tx))
	_, err = tx.Exec(ctx, effect(f.schema), leases[0].Start, leases[0].Fence, "lease")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "COMPLETE", f.row(leases[0].Start).Status)

	// ...or not at all.
	tx, err = f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, leases[1].CompleteTx(ctx, tx))
	_, err = tx.Exec(ctx, effect(f.schema), leases[1].Start, leases[1].Fence, "lease")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "ACQUIRED", f.row(leases[1].Start).Status)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
}

func TestKeepAliveAndLostContext(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{LeaseTTL: 300 * time.Millisecond}})
	leases, err := q.Claim(ctx, 2)
	require.NoError(t, err)
	firstExpiry := leases[0].Until()
	stop := q.KeepAlive(ctx, leases)
	defer stop()
	workCtx, cancel := leases[1].Context(ctx)
	defer cancel()

	// Wait, on the database clock, for three TTLs from the claim.
	f.waitForDB(firstExpiry.Add(600 * time.Millisecond))
	require.Equal(t, "ACQUIRED", f.row(leases[0].Start).Status, "kept alive past three TTLs")
	taken, err := f.queue(Options{}).Claim(ctx, 2)
	require.NoError(t, err)
	require.Empty(t, taken)

	// Someone re-opens slot 1 under the holder: the next heartbeat finds it
	// gone and cancels the work's context.
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', owner = NULL, lease_until = NULL WHERE slot_start = $1`, leases[1].Start)
	select {
	case <-workCtx.Done():
		require.ErrorIs(t, context.Cause(workCtx), ErrLeaseLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the lost lease did not cancel its context")
	}
	require.NoError(t, leases[0].Complete(ctx))
}

func TestEject(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	holder := f.queue(Options{})
	leases, err := holder.Claim(ctx, 1)
	require.NoError(t, err)

	callback := f.queue(Options{})
	ejected, err := callback.Eject(ctx, leases[0].Start)
	require.NoError(t, err)
	require.True(t, ejected.TookOver)
	require.Greater(t, ejected.Fence, leases[0].Fence)
	require.ErrorIs(t, leases[0].Complete(ctx), ErrLeaseLost)
	require.NoError(t, ejected.Complete(ctx))

	_, err = callback.Eject(ctx, leases[0].Start)
	require.ErrorIs(t, err, ErrNotHeld, "a COMPLETE slot cannot be ejected")
	_, err = callback.Eject(ctx, f.slotStart(99))
	require.ErrorIs(t, err, ErrNotHeld, "nor a missing one")

	// A slot held in locked mode cannot be taken from its transaction.
	inHandler := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = holder.Run(ctx, func(context.Context, pgx.Tx, Slot) error {
			close(inHandler)
			<-release
			return nil
		})
	}()
	<-inHandler
	_, err = callback.Eject(ctx, f.slotStart(1))
	require.ErrorIs(t, err, ErrHeld)
	close(release)
	<-done

	// An acquirable slot is simply claimed.
	claimed, err := callback.Eject(ctx, f.slotStart(2))
	require.NoError(t, err)
	require.False(t, claimed.TookOver)
}

// TestEjectRacesCompletion: when an ejection and the holder's completion
// race, exactly one of them wins.
func TestEjectRacesCompletion(t *testing.T) {
	const rounds = 60
	f := newFixture(t, rounds)
	ctx := context.Background()
	holder := f.queue(Options{})
	ejector := f.queue(Options{})
	wins := map[string]int{}
	for i := range rounds {
		leases, err := holder.Claim(ctx, 1)
		require.NoError(t, err)
		require.Len(t, leases, 1)
		var completeErr, ejectErr error
		var ejected *Lease
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); completeErr = leases[0].Complete(ctx) }()
		go func() { defer wg.Done(); ejected, ejectErr = ejector.Eject(ctx, leases[0].Start) }()
		wg.Wait()
		switch {
		case completeErr == nil:
			require.ErrorIs(t, ejectErr, ErrNotHeld, "round %d", i)
			require.Equal(t, "COMPLETE", f.row(leases[0].Start).Status)
			wins["complete"]++
		case ejectErr == nil:
			require.ErrorIs(t, completeErr, ErrLeaseLost, "round %d", i)
			r := f.row(leases[0].Start)
			require.Equal(t, "ACQUIRED", r.Status)
			require.Equal(t, ejected.Fence, r.Fence)
			require.NoError(t, ejected.Complete(ctx))
			wins["eject"]++
		default:
			t.Fatalf("round %d: both lost: %v / %v", i, completeErr, ejectErr)
		}
	}
	t.Logf("wins: %v", wins)
}

// TestLockedModeTakesOverExpiredLease: a series worked in both modes. A
// locked-mode worker takes over an expired lease; the stale lease holder's
// completion waits for it and then fails.
func TestLockedModeTakesOverExpiredLease(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	leases, err := f.queue(Options{}).Claim(ctx, 1)
	require.NoError(t, err)
	f.expire(leases[0].Start)
	res, ok, err := f.queue(Options{Policy: Policy{TakeoverGrace: -1}}).Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		require.True(t, s.TookOver)
		return writeEffect(ctx, tx, f.schema, s, "locked")
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Completed, res.Outcome)
	require.ErrorIs(t, leases[0].Complete(ctx), ErrLeaseLost)
	r := f.row(leases[0].Start)
	require.Equal(t, "COMPLETE", r.Status)
	require.Nil(t, r.Owner)
}

// TestTakeoverGrace: an expired lease is left to its holder for the
// takeover grace (a holder cut off by a failover records its outcome once
// the database is back), then taken over.
func TestTakeoverGrace(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	leases, err := f.queue(Options{Policy: Policy{LeaseTTL: time.Second}}).Claim(ctx, 1)
	require.NoError(t, err)
	other := f.queue(Options{Policy: Policy{TakeoverGrace: 2 * time.Second}})
	// The lease has just expired: the grace has not passed.
	f.exec(`UPDATE {{schema}}.slot SET lease_until = clock_timestamp() - interval '100 milliseconds'`)
	none, err := other.Claim(ctx, 1)
	require.NoError(t, err)
	if f.count(`SELECT count(*) FROM {{schema}}.slot WHERE clock_timestamp() < lease_until + interval '2 s'`) == 1 {
		require.Empty(t, none, "an expired lease is not taken over within the grace")
	}
	require.NoError(t, leases[0].Complete(ctx), "the holder may still record its outcome")

	leases, err = f.queue(Options{Policy: Policy{LeaseTTL: time.Second}}).Claim(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, leases, "the slot is complete")
}

// TestEveryModeAtOnce: 16 locked, 16 batched and 16 lease workers over 5,000
// slots of one series, each handler writing its effect in the slot's
// transaction. Every slot is COMPLETE and has exactly one effect.
func TestEveryModeAtOnce(t *testing.T) {
	const slots = 5000
	f := newFixture(t, slots)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 40
	ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := f.queueOn(pool, Options{})
	var handled [3]atomic.Int64
	var wg sync.WaitGroup
	worker := func(mode int, step func() (int, error)) {
		defer wg.Done()
		for {
			n, err := step()
			require.NoError(t, err)
			if n == 0 {
				return
			}
			handled[mode].Add(int64(n))
		}
	}
	handler := func(mode string) Handler {
		return func(ctx context.Context, tx pgx.Tx, s Slot) error {
			return writeEffect(ctx, tx, f.schema, s, mode)
		}
	}
	for range 16 {
		wg.Add(3)
		go worker(0, func() (int, error) {
			_, ok, err := q.Run(ctx, handler("locked"))
			if ok {
				return 1, err
			}
			return 0, err
		})
		go worker(1, func() (int, error) {
			results, err := q.RunBatch(ctx, 20, handler("batch"))
			for _, r := range results {
				require.Equal(t, Completed, r.Outcome)
			}
			return len(results), err
		})
		go worker(2, func() (int, error) {
			leases, err := q.Claim(ctx, 10)
			if err != nil || len(leases) == 0 {
				return 0, err
			}
			stop := q.KeepAlive(ctx, leases)
			defer stop()
			for _, l := range leases {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return 0, err
				}
				if err := l.CompleteTx(ctx, tx); err != nil {
					return 0, err
				}
				if _, err := tx.Exec(ctx, effect(f.schema), l.Start, l.Fence, "lease"); err != nil {
					return 0, err
				}
				if err := tx.Commit(ctx); err != nil {
					return 0, err
				}
			}
			return len(leases), nil
		})
	}
	wg.Wait()
	total := handled[0].Load() + handled[1].Load() + handled[2].Load()
	t.Logf("locked %d, batched %d, lease %d", handled[0].Load(), handled[1].Load(), handled[2].Load())
	require.Equal(t, int64(slots), total)
	require.Equal(t, slots, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
	require.Equal(t, slots, f.count(`SELECT count(*) FROM {{schema}}.effect`))
	require.Equal(t, slots, f.count(`SELECT count(DISTINCT slot_start) FROM {{schema}}.effect`), "no slot handled twice")
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.effect e JOIN {{schema}}.slot s USING (slot_start) WHERE e.fence <> s.fence`),
		"each effect carries the fence that completed its slot")
	for mode := range handled {
		require.Positive(t, handled[mode].Load(), "mode %d took part", mode)
	}
}

// TestCompletionsMerge: a full batch of holders completing at once is
// written together, and a lost lease among them gets ErrLeaseLost without
// harming the others.
func TestCompletionsMerge(t *testing.T) {
	f := newFixture(t, mergeBatch+1)
	ctx := context.Background()
	q := f.queue(Options{CompletionWindow: time.Hour}) // only a full batch can be written before the test times out
	leases, err := q.Claim(ctx, mergeBatch)
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'AVAILABLE', owner = NULL, lease_until = NULL WHERE slot_start = $1`, leases[7].Start)
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = l.Complete(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 7 {
			require.ErrorIs(t, err, ErrLeaseLost)
		} else {
			require.NoError(t, err, "lease %d", i)
		}
	}
	require.Equal(t, mergeBatch-1, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))

	// A lone completion is written after the window.
	quick := f.queue(Options{CompletionWindow: 10 * time.Millisecond})
	more, err := quick.Claim(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, more[0].Complete(ctx))
	require.Equal(t, mergeBatch, f.count(`SELECT count(*) FROM {{schema}}.slot WHERE status = 'COMPLETE'`))
}

// TestHeartbeatDoesNotQueueBehindALockedRow: one of a holder's leases is
// row-locked by another transaction for a long time; the heartbeat still
// renews the others at once, and does not declare the busy one lost.
func TestHeartbeatDoesNotQueueBehindALockedRow(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{LeaseTTL: time.Minute}})
	leases, err := q.Claim(ctx, 2)
	require.NoError(t, err)
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)                                           //nolint:errcheck
	_, err = tx.Exec(ctx, effect(f.schema), leases[0].Start, 0, "x") // any statement, then lock the row
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+f.schema+".slot WHERE slot_start = $1 FOR NO KEY UPDATE", leases[0].Start)
	require.NoError(t, err)

	began := time.Now()
	before := leases[1].Until()
	lost, err := q.Extend(ctx, leases)
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Less(t, time.Since(began), 2*time.Second, "no waiting for the locked row")
	require.True(t, leases[1].Until().After(before), "the free lease was renewed")
	select {
	case <-leases[0].Lost():
		t.Fatal("a busy lease is not lost")
	default:
	}
}

// TestRangedTakeover: a queue limited to [From, To) takes over the expired
// leases of its range only, and refuses a range that ends before it starts.
func TestRangedTakeover(t *testing.T) {
	f := newFixture(t, 10)
	ctx := context.Background()
	held, err := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour}}).Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, held, 10)
	f.exec(`UPDATE {{schema}}.slot SET lease_until = now() - interval '1 hour'`)

	ranged := f.queue(Options{From: f.slotStart(4), To: f.slotStart(6), Policy: Policy{TakeoverGrace: -1}})
	taken, err := ranged.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, taken, 2)
	for i, l := range taken {
		require.True(t, l.TookOver)
		require.True(t, l.Start.Equal(f.slotStart(4+i)), "took over %s, want %s", l.Start, f.slotStart(4+i))
	}

	_, err = New(ctx, f.db.Pool, f.grid, Options{Schema: f.schema, From: f.slotStart(6), To: f.slotStart(4)})
	require.ErrorIs(t, err, slot.ErrInvalid)
	require.ErrorContains(t, err, "From 2026-01-01T00:06:00Z is after To 2026-01-01T00:04:00Z")
}

// TestListsCheckTheFence: a write given a list of leases names each by
// its fence, not by its owner alone: leases their own queue lost and
// claimed again are lost to a heartbeat and a completion of the list, and
// the new leases stay held. The fences are tested as a set, which names
// each lease only because a fence is given for one slot once.
func TestListsCheckTheFence(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	q := f.queue(Options{Policy: Policy{LeaseTTL: time.Hour, TakeoverGrace: -1}})
	stale, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	require.Len(t, stale, 3)
	f.exec(`UPDATE {{schema}}.slot SET lease_until = now() - interval '1 hour'`)
	fresh, err := q.Claim(ctx, 3)
	require.NoError(t, err)
	require.Len(t, fresh, 3, "the queue takes its own expired leases over")
	rows := map[time.Time]row{}
	for _, l := range fresh {
		rows[l.Start] = f.row(l.Start)
	}

	lost, err := q.Extend(ctx, stale)
	require.NoError(t, err)
	require.Len(t, lost, 3, "a heartbeat of the lost leases")
	lost, err = q.CompleteMany(ctx, stale)
	require.NoError(t, err)
	require.Len(t, lost, 3, "a completion of the lost leases")
	for start, r := range rows {
		require.Equal(t, r, f.row(start), "the lost leases' writes change nothing")
	}

	lost, err = q.CompleteMany(ctx, fresh)
	require.NoError(t, err)
	require.Empty(t, lost)
	for _, l := range fresh {
		require.Equal(t, "COMPLETE", f.row(l.Start).Status)
	}
}
