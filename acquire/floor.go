package acquire

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/almanacdev/almanac/slot"
)

// fullSearchEvery is how often an oldest-first queue searches for AVAILABLE
// slots from the start of its range even though its floor says where the
// acquirable ones begin: the longest a slot that became acquirable behind
// the floor, by another process's hand, waits when there is work after it.
const fullSearchEvery = time.Second

// floor is where an oldest-first queue's next search for AVAILABLE slots
// starts: past the slots the searches before it have taken or are taking.
//
// Every slot acquired leaves an entry in slot_available_idx behind, and a
// search from the start of the range steps over each of them until it is
// marked dead. That takes the slot's old row version to be invisible to
// every transaction in the cluster, so while any transaction runs long
// (a locked-mode job, a report, a backup) none is marked, and every search
// steps over every slot acquired since that transaction began, so a
// search costs more the longer it runs. Searching from the floor steps
// over one batch (docs/design/search-floor.md has the measurement).
//
// Searches that run at the same time would still all start at the same
// place, and each would step over the rows the others have just locked,
// on the same pages as they write. So each search reserves the part of the
// range its slots can take up at the least, as many grid slots as it asks
// for from where it starts, and the next one starts after that (ahead).
// That is no change of order: a search takes the first acquirable slots
// from where it starts, so every acquirable slot it did not find locked
// in its reserved part is among those it takes. Measured on the statements
// of a batch of 100 with eight clients, searches that each start at their
// own part of the range did 1.3 times the batches of searches that all
// start at the same place.
//
// What the floor can miss is a slot behind it that becomes acquirable
// again, so a search starts from the start of the range
//   - when the search from the floor found fewer slots than asked for
//     (then in the same call, over the part of the range before the floor),
//     and the next search starts at the earliest slot taken, not ahead;
//   - after this queue recorded an outcome that leaves a slot AVAILABLE
//     (a failure, a snooze, a release, an abandoned run), or after Rewind
//     (the scheduler calls it when it is told of a re-open or a retry);
//   - and at least every fullSearchEvery; when that search finds slots
//     before ahead, the searches after it go on from there.
//
// Queues of other processes on the same series have floors of their own;
// the series' frontier (see frontier) tells their searches apart.
//
// A newest-first queue has no floor: the slots that become due arrive at
// the end of the range, where its searches start.
type floor struct {
	mu sync.Mutex
	// at is the start of the earliest slot the last search took; zero:
	// search from the start of the range.
	at time.Time
	// ahead is where the next search starts when it is after at: the end
	// of the parts of the range the searches so far have reserved, or of
	// the slots they took if that is later. Zero: at.
	ahead time.Time
	// epoch counts rewinds, so that a search that began before one does
	// not move the floor past the slot the rewind was for.
	epoch uint64
	// full is when the last search from the start of the range began, on
	// the monotonic clock.
	full  time.Time
	every time.Duration
	off   bool // newest first
	grid  slot.Series
}

func newFloor(newestFirst bool, grid slot.Series) *floor {
	return &floor{every: fullSearchEvery, off: newestFirst, grid: grid}
}

// start returns where the next search for n slots starts (zero for the
// start of the range) and the epoch to hand to advance, and reserves for
// it the n grid slots from there.
func (f *floor) start(n int) (time.Time, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off {
		return time.Time{}, f.epoch
	}
	if now := time.Now(); f.at.IsZero() || now.Sub(f.full) >= f.every {
		f.at, f.full = time.Time{}, now
		return time.Time{}, f.epoch
	}
	lo := f.at
	if f.ahead.After(lo) {
		lo = f.ahead
	}
	f.ahead = f.reach(lo, n)
	return lo, f.epoch
}

// reach returns the start of the grid slot n slots after the one that
// holds t: the least a search from t for n slots spans. Where the grid
// cannot say (the end of its years, a slot a time zone skipped), it
// returns t, which reserves nothing.
func (f *floor) reach(t time.Time, n int) time.Time {
	s, err := f.grid.Floor(t)
	if err != nil {
		return t
	}
	next, err := f.grid.Slot(s.Index + int64(n))
	if err != nil {
		return t
	}
	return next.Start
}

// advance records what a search begun in epoch at lo took: slots, in the
// range searched from its start (whole) or from the floor; short when the
// search from where it started found fewer than it asked for. A search
// from the floor only moves at forward; one from the start of the range
// sets it, since it saw everything before the earliest slot it took. A
// rewind since the search began voids it.
//
// Expired leases a search takes over come first, in places it reserved
// for AVAILABLE slots: a search for n that takes over k of them takes
// n-k AVAILABLE slots, which can span less than the n grid slots it
// reserved. It saw every acquirable slot up to the end of those it took
// (or up to lo when it took none), and nothing after: the next search
// starts there at the latest, or the slots after it would wait for the
// next search from the start of the range.
func (f *floor) advance(epoch uint64, lo time.Time, slots []Slot, whole, short bool) {
	first, last, ok := span(slots)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off || epoch != f.epoch {
		return
	}
	switch {
	case short:
		// Nothing acquirable after where it started: the next search
		// starts at the earliest slot taken.
		f.ahead = time.Time{}
	case whole && ok && first.Before(f.ahead):
		// Acquirable slots behind ahead: go on after them.
		f.ahead = last
	case ok && last.After(f.ahead):
		f.ahead = last
	}
	if ok && (whole || first.After(f.at)) {
		f.at = first
	}
	if !short && slices.ContainsFunc(slots, func(s Slot) bool { return s.TookOver }) {
		seen := lo
		if ok {
			seen = last
		}
		if f.ahead.After(seen) {
			f.ahead = seen
		}
		if f.at.After(seen) {
			f.at = seen
		}
	}
}

// span returns the start of the earliest slot of slots that was acquirable
// (not taken over from an expired lease) and the end of the latest, and
// false when there is none.
func span(slots []Slot) (first, last time.Time, ok bool) {
	for _, s := range slots {
		if s.TookOver {
			continue
		}
		if !ok || s.Start.Before(first) {
			first = s.Start
		}
		if !ok || s.End.After(last) {
			last = s.End
		}
		ok = true
	}
	return first, last, ok
}

// skipTo moves the part reserved for the searches to come to t, when that
// is further on: a search starts at a block of the series' frontier, and
// the next one goes on after its part.
func (f *floor) skipTo(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.ahead) {
		f.ahead = t
	}
}

// rewind makes the next search start from the start of the range.
func (f *floor) rewind() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.ahead = time.Time{}, time.Time{}
	f.epoch++
}

// searchFrom returns where the queue's next search for n AVAILABLE slots
// starts, its floor (or the block of the series' frontier it draws there;
// see frontier) or the start of its range, and the epoch to hand to
// floor.advance. A floor past the end of the range (the part reserved for
// the last slots of a range runs past it) is its end: the search from
// there finds nothing and looks at the whole range. It first makes the
// lowering of the frontier the last search asked for.
func (q *Queue) searchFrom(ctx context.Context, n int) (time.Time, uint64) {
	q.lowerFrontier(ctx)
	at, epoch := q.floor.start(n)
	switch {
	case at.After(q.to):
		return q.to, epoch
	case at.After(q.from):
		return q.fromFrontier(ctx, at, n), epoch
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
