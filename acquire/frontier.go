package acquire

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Blocks are what a queue draws from its series' frontier: at least
// blockParts parts and blockSlots slots, so that searches of 100 slots draw
// once in 41 and searches of one slot once in 4,096. A draw is a round trip
// on the search's path; with blocks of 1,024 slots (a draw in 11 searches
// of 100) one process lost about 5 % of its lease-mode throughput.
const (
	blockParts = 8
	blockSlots = 4096
)

// frontierTimeout bounds a draw from the frontier and a lowering of it;
// past it the search goes on from the queue's own floor.
const frontierTimeout = time.Second

// frontier is a queue's share of its series' frontier (the slot_frontier
// table), which lets the queues of several processes on one series split
// a backlog among them as a queue's floor splits it among its own
// searches.
//
// The range is cut into parts of n grid slots for searches of n slots:
// part k is slots k·n to k·n+n−1. The series' frontier is the first part no
// queue has drawn. A queue whose searches come back full draws a block of
// parts from it, in a transaction of its own, and its searches go through
// the block as the floor leads them (see floor); when the floor leads a
// search out of the block, the queue draws the next block, and the search
// starts at the block's first part when that is further on: the parts in
// between are other processes' blocks. Without it, each process's next
// search would read through the slots the others completed since its last
// and step over the rows they hold, so a backlog drained by several
// processes would cost more index reads per slot than by one
// (docs/design/series-frontier.md has the measurement).
//
// The frontier is a hint, like the floor: a search still takes the first
// acquirable slots from where it starts, so a draw or a lowering that
// fails (a lost connection, a schema not migrated yet) costs order and
// speed, never a slot, and the queue goes on from its own floor for a
// block's worth of parts. What it must not cost is the order of a backlog:
//   - A queue draws only while its searches come back full. A series in
//     steady state (a slot due now and then, every search short) never
//     pays a round trip for it.
//   - A search that comes back short lowers the frontier to the part of
//     the earliest slot it took: there is nothing acquirable after where it
//     started, so the parts after that need no one's search. Only a queue
//     that has drawn since it last lowered the frontier lowers it, so that
//     steady state costs nothing here either.
//   - After Rewind (a re-open or a retry the scheduler was told of), the
//     first search from the start of the range that takes slots lowers the
//     frontier to the part of the earliest of them, so that every process's
//     next blocks go through the slots re-opened behind it, oldest first.
//     The periodic search from the start of the range lowers nothing: what
//     it takes is in blocks other processes are going through.
//   - A draw never moves the frontier past the end of the queue's range
//     (queues of one series may have different ranges).
//
// Draws and lowerings run before a locked-mode worker takes its
// transaction's connection (a lowering a search asks for waits for the
// next search), so they never use the connections kept for completions.
type frontier struct {
	mu sync.Mutex
	// drawing is held by the search of the queue that draws.
	drawing sync.Mutex
	// size is the slots per part of the block [lo, hi), 0 for none.
	size   int
	lo, hi int64
	// busy: the last search found as many slots as it asked for.
	busy bool
	// drawn: the queue has drawn a block since it last lowered the
	// frontier, so a short search must lower it.
	drawn bool
	// rewound: the next search from the start of the range that takes
	// slots lowers the frontier.
	rewound bool
	// lower is a lowering waiting for the next search: to part lowerTo of
	// lowerSize slots.
	lower     bool
	lowerSize int
	lowerTo   int64
}

// partOf returns the index of the part of n slots that holds t.
func (q *Queue) partOf(t time.Time, n int) (int64, bool) {
	s, err := q.grid.Floor(t)
	if err != nil {
		return 0, false
	}
	part := s.Index / int64(n)
	if s.Index%int64(n) < 0 {
		part-- // the part of a slot before the origin
	}
	return part, true
}

// blockOf is the number of parts of n slots in a block.
func blockOf(n int) int64 { return max(blockParts, (blockSlots+int64(n)-1)/int64(n)) }

// fromFrontier returns where a search for n slots that the floor starts at
// lo starts: lo, or the start of the block the queue draws, when lo lies
// past the queue's block and the block drawn lies further on. A lo behind
// the block (the periodic search from the start of the range moved the
// floor back, or a search of this queue drew while this one waited) draws
// nothing: the floor leads the searches after it back to the block.
// Draws of one queue run one at a time, each after seeing the block the
// one before drew, so that the queue holds one block and leaves no part
// of it behind.
func (q *Queue) fromFrontier(ctx context.Context, lo time.Time, n int) time.Time {
	part, ok := q.partOf(lo, n)
	if !ok {
		return lo
	}
	f := &q.frontier
	if !f.needsDraw(part, n) {
		return lo
	}
	f.drawing.Lock()
	defer f.drawing.Unlock()
	if !f.needsDraw(part, n) {
		return lo
	}
	first, drawn := q.draw(ctx, part, n)
	f.mu.Lock()
	f.size, f.lo, f.hi = n, part, part+blockOf(n)
	if drawn {
		f.lo, f.hi, f.drawn = first, first+blockOf(n), true
	}
	f.mu.Unlock()
	if first <= part || !drawn {
		return lo
	}
	start, err := q.grid.Slot(first * int64(n))
	if err != nil || !start.Start.Before(q.to) {
		return lo
	}
	if next, err := q.grid.Slot((first + 1) * int64(n)); err == nil {
		q.floor.skipTo(next.Start)
	}
	return start.Start
}

// needsDraw says whether a search for n slots from part draws a block: it
// does while the searches come back full, when part lies past the block
// held (or there is none of n slots).
func (f *frontier) needsDraw(part int64, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.busy && (f.size != n || part >= f.hi)
}

// draw takes a block of parts of n slots from the series' frontier, from
// part on at the earliest, and returns its first part; false when the
// frontier lies past the end of the queue's range or the draw failed.
func (q *Queue) draw(ctx context.Context, part int64, n int) (int64, bool) {
	end := int64(math.MaxInt64) // the first part that starts at or after the end of the range
	if last, ok := q.partOf(q.to.Add(-time.Microsecond), n); ok {
		end = last + 1
	}
	if part >= end {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, frontierTimeout)
	defer cancel()
	var first int64
	var drawn bool
	_, err := q.write(ctx, func(b *pgx.Batch) {
		drawn = false
		b.Queue(q.sql.draw, q.name, q.interval, n, part, blockOf(n), end).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&first)
			if errors.Is(err, pgx.ErrNoRows) { // the frontier is past the range
				return nil
			}
			drawn = err == nil
			return err
		})
	})
	if err != nil {
		q.opts.Logger.Debug("almanac: drawing from the series' frontier failed; searching from this process's own floor",
			"series", q.name, "interval", q.interval, "error", err)
		return 0, false
	}
	return first, drawn
}

// afterSearch records what a search for n slots took for the frontier:
// slots, from the start of the range (whole) or not, short when it found
// fewer than n.
func (q *Queue) afterSearch(slots []Slot, n int, whole, short bool) {
	first, _, took := span(slots)
	f := &q.frontier
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = !short
	// Only a queue that has drawn since it last lowered the frontier lowers
	// it: a series in steady state, whose queues never draw, pays no round
	// trip for it, however often its scheduler is woken.
	lower := f.drawn && (short || (whole && f.rewound && took))
	if whole && took {
		f.rewound = false
	}
	if !lower {
		if short {
			f.size = 0
		}
		return
	}
	f.size, f.drawn = 0, false
	if !took {
		return
	}
	if part, ok := q.partOf(first, n); ok {
		f.lower, f.lowerSize, f.lowerTo = true, n, part
	}
}

// rewindFrontier makes the next search from the start of the range that
// takes slots lower the frontier to them.
func (q *Queue) rewindFrontier() {
	q.frontier.mu.Lock()
	q.frontier.rewound = true
	q.frontier.mu.Unlock()
}

// lowerFrontier makes the lowering the last search asked for, if any.
func (q *Queue) lowerFrontier(ctx context.Context) {
	f := &q.frontier
	f.mu.Lock()
	lower, n, to := f.lower, f.lowerSize, f.lowerTo
	f.lower = false
	f.mu.Unlock()
	if !lower {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, frontierTimeout)
	defer cancel()
	if _, err := q.write(ctx, func(b *pgx.Batch) { b.Queue(q.sql.lower, q.name, q.interval, n, to) }); err != nil {
		q.opts.Logger.Debug("almanac: lowering the series' frontier failed", "series", q.name, "interval", q.interval, "error", err)
	}
}
