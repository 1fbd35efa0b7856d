package acquire

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// mergeBatch bounds the completions one merged statement writes.
const mergeBatch = 100

// merger writes the completions of leases that finish within
// Options.CompletionWindow of each other with one UPDATE … FROM unnest
// (CompleteMany), each caller still learning its own result: the lease-mode
// counterpart of a batched commit, for workers that hold one lease each.
// Its goroutine runs while completions wait, and ends when none do.
type merger struct {
	q       *Queue
	mu      sync.Mutex
	waiting []completion
	running bool
	full    chan struct{} // signalled when mergeBatch completions wait
}

type completion struct {
	ctx   context.Context
	lease *Lease
	reply chan error
}

func newMerger(q *Queue) *merger { return &merger{q: q, full: make(chan struct{}, 1)} }

// complete marks the lease COMPLETE together with other waiting
// completions, and returns when it is written: nil, an error wrapping
// ErrLeaseLost (nothing changed), or the error of the statement.
func (m *merger) complete(ctx context.Context, l *Lease) error {
	req := completion{ctx: ctx, lease: l, reply: make(chan error, 1)}
	m.mu.Lock()
	m.waiting = append(m.waiting, req)
	if len(m.waiting) >= mergeBatch {
		select {
		case m.full <- struct{}{}:
		default:
		}
	}
	if !m.running {
		m.running = true
		go m.loop()
	}
	m.mu.Unlock()
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		// The write may still happen; the slot row tells.
		return ctx.Err()
	}
}

// loop writes what waits, a window's worth at a time, until nothing does.
func (m *merger) loop() {
	for {
		timer := time.NewTimer(m.q.opts.CompletionWindow)
		select {
		case <-timer.C:
		case <-m.full:
			timer.Stop()
		}
		m.mu.Lock()
		batch := m.waiting
		if len(batch) > mergeBatch {
			batch, m.waiting = batch[:mergeBatch:mergeBatch], batch[mergeBatch:]
		} else {
			m.waiting = nil
		}
		if len(batch) == 0 {
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		m.flush(batch)
	}
}

func (m *merger) flush(batch []completion) {
	leases := make([]*Lease, 0, len(batch))
	for _, req := range batch {
		leases = append(leases, req.lease)
	}
	// The statement must not die with one caller's context: others wait on it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), time.Minute)
	defer cancel()
	lost, err := m.q.CompleteMany(ctx, leases)
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
