package acquire

import (
	"context"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// orphanTimeout bounds the release of orphaned leases: it holds up this
// queue's claims while it runs.
const orphanTimeout = 5 * time.Second

// holdings tracks the leases of a queue that may still be worked on, so
// that leases the queue holds in the database without a Lease to show for
// them can be told apart and released. Those come from a claim that
// committed while its connection was lost: nobody works on them, and
// without this they would wait for their lease to expire (LeaseTTL plus
// TakeoverGrace).
//
// A lease is tracked from its claim until a final write, until the
// database says it is lost, or until the Lease is garbage collected (its
// holder dropped it, so nobody works on it). Claims hold claiming for
// reading from the statement until their leases are tracked; the release
// of orphans holds it for writing, so it never mistakes a claim in flight
// for an orphan.
type holdings struct {
	claiming sync.RWMutex
	mu       sync.Mutex
	byFence  map[int64]weak.Pointer[Lease]
}

func (h *holdings) track(l *Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byFence == nil {
		h.byFence = map[int64]weak.Pointer[Lease]{}
	}
	h.byFence[l.Fence] = weak.Make(l)
	runtime.AddCleanup(l, h.untrackFence, l.Fence)
}

func (h *holdings) untrack(l *Lease) { h.untrackFence(l.Fence) }

func (h *holdings) untrackFence(fence int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byFence, fence)
}

// live returns the fences of the tracked leases still referenced.
func (h *holdings) live() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	fences := make([]int64, 0, len(h.byFence))
	for fence, p := range h.byFence {
		if p.Value() != nil {
			fences = append(fences, fence)
		}
	}
	return fences
}

// releaseOrphans makes the slots this queue holds in the database without
// a live Lease acquirable again. It runs after a claim whose connection was
// lost while it may have committed. Only a queue with its own random owner
// id does it: an owner id given in Options may be shared with other
// processes, whose leases this one cannot see.
func (q *Queue) releaseOrphans(ctx context.Context) {
	if q.sharedOwner {
		return
	}
	q.leases.claiming.Lock()
	defer q.leases.claiming.Unlock()
	ctx, cancel := context.WithTimeout(ctx, orphanTimeout)
	defer cancel()
	var released int64
	_, err := q.write(ctx, func(b *pgx.Batch) {
		b.Queue(q.sql.releaseOrphans, q.name, q.interval, q.opts.Owner, q.leases.live()).Exec(func(tag pgconn.CommandTag) error {
			released = tag.RowsAffected()
			return nil
		})
	})
	if err != nil {
		q.opts.Logger.Warn("almanac: releasing leases a lost claim left behind failed; they are taken over once they expire",
			"series", q.name, "interval", q.interval, "error", err)
		return
	}
	if released > 0 {
		q.floor.rewind()
		q.opts.Logger.Warn("almanac: released leases a claim whose connection was lost had taken",
			"series", q.name, "interval", q.interval, "slots", released)
	}
}
