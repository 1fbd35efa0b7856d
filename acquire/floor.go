package acquire

import (
	"sync"
	"time"
)

// fullSearchEvery is how often an oldest-first queue searches for AVAILABLE
// slots from the start of its range even though its floor says where the
// acquirable ones begin: the longest a slot that became acquirable behind
// the floor, by another process's hand, waits when there is work after it.
const fullSearchEvery = time.Second

// floor is where an oldest-first queue's next search for AVAILABLE slots
// starts: the earliest slot its last acquisition took from the acquirable
// ones.
//
// Every slot acquired leaves an entry in slot_available_idx behind, and a
// search from the start of the range steps over each of them until it is
// marked dead. That takes the slot's old row version to be invisible to
// every transaction in the cluster, so while any transaction runs long
// (a locked-mode job, a report, a backup) none is marked, and every search
// steps over every slot acquired since that transaction began: measured
// with eight workers claiming 100 slots at a time while a transaction held
// its snapshot, throughput fell by half after 40,000 slots and by
// two-thirds after 100,000. Searching from the floor steps over one batch.
//
// What the floor can miss is a slot behind it that becomes acquirable
// again, so a search starts from the start of the range
//   - when the search from the floor found fewer slots than asked for
//     (then in the same call, over the part of the range before the floor);
//   - after this queue recorded an outcome that leaves a slot AVAILABLE
//     (a failure, a snooze, a release, an abandoned run), or after Rewind
//     (the scheduler calls it when it is told of a re-open or a retry);
//   - and at least every fullSearchEvery.
//
// A newest-first queue has no floor: the slots that become due arrive at
// the end of the range, where its searches start.
type floor struct {
	mu sync.Mutex
	// at is the start of the earliest slot the last search took; zero:
	// search from the start of the range.
	at time.Time
	// epoch counts rewinds, so that a search that began before one does
	// not move the floor past the slot the rewind was for.
	epoch uint64
	// full is when the last search from the start of the range began, on
	// the monotonic clock.
	full  time.Time
	every time.Duration
	off   bool // newest first
}

func newFloor(newestFirst bool) *floor {
	return &floor{every: fullSearchEvery, off: newestFirst}
}

// start returns where the next search starts (zero for the start of the
// range) and the epoch to hand to advance.
func (f *floor) start() (time.Time, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off {
		return time.Time{}, f.epoch
	}
	if now := time.Now(); f.at.IsZero() || now.Sub(f.full) >= f.every {
		f.at, f.full = time.Time{}, now
	}
	return f.at, f.epoch
}

// advance records that a search begun in epoch took, from the acquirable
// slots, ones starting at earliest and later. A search from the floor only
// moves it forward; one from the start of the range (whole) sets it, since
// it saw everything before earliest. A rewind since the search began voids
// it.
func (f *floor) advance(epoch uint64, earliest time.Time, whole bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off || epoch != f.epoch || (!whole && !earliest.After(f.at)) {
		return
	}
	f.at = earliest
}

// earliest returns the start of the earliest slot of slots that was
// acquirable (not taken over from an expired lease), and false when there
// is none.
func earliest(slots []Slot) (time.Time, bool) {
	var first time.Time
	for _, s := range slots {
		if !s.TookOver && (first.IsZero() || s.Start.Before(first)) {
			first = s.Start
		}
	}
	return first, !first.IsZero()
}

// rewind makes the next search start from the start of the range.
func (f *floor) rewind() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = time.Time{}
	f.epoch++
}

// searchFrom returns where the queue's next search for AVAILABLE slots
// starts, its floor or the start of its range, and the epoch to hand to
// floor.advance.
func (q *Queue) searchFrom() (time.Time, uint64) {
	at, epoch := q.floor.start()
	if at.After(q.from) {
		return at, epoch
	}
	return q.from, epoch
}

// expiredIn returns the range in which an acquisition takes expired leases
// over: the queue's, or with takeovers false an empty one.
func (q *Queue) expiredIn(takeovers bool) (from, to time.Time) {
	if takeovers {
		return q.from, q.to
	}
	return q.from, q.from
}
