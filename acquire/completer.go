package acquire

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Completer merges the completions of many concurrent lease holders into
// few statements: a waiting completion is written with the others that
// arrive within MaxDelay, or as soon as MaxBatch are waiting, with one
// UPDATE … FROM unnest. Each caller still learns its own result. It is the
// lease-mode counterpart of a batched commit, for workers that hold one
// lease each.
type Completer struct {
	q        *Queue
	maxBatch int
	maxDelay time.Duration
	requests chan completion
	stop     chan struct{}
	done     sync.WaitGroup
}

type completion struct {
	ctx   context.Context
	lease *Lease
	reply chan error
}

// NewCompleter starts a Completer for the queue's leases. maxBatch <= 0
// means 100; maxDelay <= 0 means 5 ms. Close it when done.
func (q *Queue) NewCompleter(maxBatch int, maxDelay time.Duration) *Completer {
	if maxBatch <= 0 {
		maxBatch = 100
	}
	if maxDelay <= 0 {
		maxDelay = 5 * time.Millisecond
	}
	c := &Completer{q: q, maxBatch: maxBatch, maxDelay: maxDelay,
		requests: make(chan completion), stop: make(chan struct{})}
	c.done.Add(1)
	go c.loop()
	return c
}

// Complete marks the lease COMPLETE together with other waiting
// completions, and returns when it is written: nil, an error wrapping
// ErrLeaseLost (nothing changed), or the error of the statement.
func (c *Completer) Complete(ctx context.Context, l *Lease) error {
	req := completion{ctx: ctx, lease: l, reply: make(chan error, 1)}
	select {
	case c.requests <- req:
	case <-c.stop:
		return fmt.Errorf("acquire: completer closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		// The write may still happen; the slot row tells.
		return ctx.Err()
	}
}

// Close stops the completer after writing what is waiting.
func (c *Completer) Close() {
	close(c.stop)
	c.done.Wait()
}

func (c *Completer) loop() {
	defer c.done.Done()
	for {
		var batch []completion
		select {
		case req := <-c.requests:
			batch = append(batch, req)
		case <-c.stop:
			return
		}
		timer := time.NewTimer(c.maxDelay)
	gather:
		for len(batch) < c.maxBatch {
			select {
			case req := <-c.requests:
				batch = append(batch, req)
			case <-timer.C:
				break gather
			case <-c.stop:
				break gather
			}
		}
		timer.Stop()
		c.flush(batch)
	}
}

func (c *Completer) flush(batch []completion) {
	leases := make([]*Lease, 0, len(batch))
	for _, req := range batch {
		leases = append(leases, req.lease)
	}
	// The statement must not die with one caller's context: others wait on it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), time.Minute)
	defer cancel()
	lost, err := c.q.CompleteMany(ctx, leases)
	gone := map[*Lease]bool{}
	for _, l := range lost {
		gone[l] = true
	}
	for _, req := range batch {
		switch {
		case err != nil:
			req.reply <- err
		case gone[req.lease]:
			req.reply <- fmt.Errorf("acquire: complete %s: %w", req.lease.Slot, ErrLeaseLost)
		default:
			req.reply <- nil
		}
	}
}
