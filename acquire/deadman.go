package acquire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrConnectionLost is the cause of a handler context cancelled because the
// held connection stopped answering pings; the slot's transaction is gone.
var ErrConnectionLost = errors.New("held connection lost")

// startPinger keeps the dead-man switch from firing while this process is
// alive: every DeadMan/4 it sends an empty query on the held connection,
// unless a handler statement is using it right then. A failed ping means the
// session is gone; it cancels the handlers' context with ErrConnectionLost.
//
// It is a timer, not a goroutine: most transactions end long before the
// first ping is due, and starting and stopping a goroutine with a ticker for
// each of them was a measurable share of a short transaction's cost. stop
// waits for a ping in progress.
func (b *lockedBatch) startPinger(ctx context.Context, lost context.CancelCauseFunc) (stop func()) {
	interval := b.q.opts.DeadMan / 4
	var (
		mu       sync.Mutex
		stopped  bool
		inFlight sync.WaitGroup
		t        *time.Timer
	)
	t = time.AfterFunc(interval, func() {
		mu.Lock()
		if stopped || ctx.Err() != nil {
			mu.Unlock()
			return
		}
		inFlight.Add(1)
		mu.Unlock()
		defer inFlight.Done()
		if b.ping(ctx, lost) {
			mu.Lock()
			if !stopped {
				t.Reset(interval)
			}
			mu.Unlock()
		}
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		inFlight.Wait()
	}
}

// ping is one tick of the pinger; it reports whether to go on.
func (b *lockedBatch) ping(ctx context.Context, lost context.CancelCauseFunc) bool {
	if start := b.handlerStart.Load(); start != 0 &&
		time.Since(time.Unix(0, start)) > b.q.opts.MaxWork+b.q.opts.DeadMan {
		return true // let the dead-man switch end a handler that ignores its deadline
	}
	if b.q.testNoPing {
		return true
	}
	if !b.guard.mu.TryLock() {
		return true // a statement is running: the session is not idle
	}
	pingCtx, cancel := context.WithTimeout(ctx, b.q.opts.DeadMan/2)
	err := b.tx.Conn().PgConn().Ping(pingCtx)
	cancel()
	b.guard.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		b.q.opts.Logger.Warn("almanac: held connection lost", "series", b.q.name, "interval", b.q.interval, "error", err)
		lost(fmt.Errorf("%w: %v", ErrConnectionLost, err))
		return false
	}
	return ctx.Err() == nil
}

// connState reads whether the held connection is closed and its
// transaction status, serialized with the pinger, which updates both.
func (b *lockedBatch) connState() (closed bool, txStatus byte) {
	b.guard.mu.Lock()
	defer b.guard.mu.Unlock()
	conn := b.tx.Conn().PgConn()
	return conn.IsClosed(), conn.TxStatus()
}
