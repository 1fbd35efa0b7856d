package almanac

import "slices"

// runQueue holds the jobs that have work and a free worker slot, so that
// the dispatcher's pick costs O(1) amortized instead of a pass over every
// job: at a boundary where thousands of series each have a slot due, a
// pass per pick made the dispatch quadratic in the series.
//
// It keeps the order pick promises: the highest Priority first, then the
// fewest running workers, then the order the jobs got work in (first come,
// first served, so that no series waits behind others that keep getting
// work). Jobs are queued in the bucket of their priority and running
// count; an entry whose job has since been taken, queued again, run out of
// work or reached its limit is stale and dropped when met. Guarded by
// engine.mu.
type runQueue struct {
	levels     map[int]*runLevel
	priorities []int  // the levels' priorities, highest first
	pushes     uint64 // numbers each queueing (job.queuedAs), from 1
}

// runLevel is the jobs of one priority, by running count.
type runLevel struct {
	byRunning []fifo
}

// fifo is a queue of jobs, each entry with the queueing it was made by.
type fifo struct {
	entries []queued
	head    int
}

type queued struct {
	j  *job
	as uint64
}

// current reports whether e is its job's queueing still: the job was not
// taken (pop, popAlong) nor queued again since. An entry left behind by
// popAlong must not come back to life when its job, its batch done, is
// queued again at the same running count: it would run ahead of every job
// queued after it.
func (e queued) current() bool { return e.j != nil && e.j.queuedAs == e.as }

// notQueued is job.queuedAt of a job not in the run queue.
const notQueued = -1

// push queues j in the bucket of its priority and running count, unless it
// is queued there already, has no work or is at its limit.
func (q *runQueue) push(j *job) {
	if !j.hasWork || j.running >= j.limit || j.queuedAt == j.running {
		return
	}
	if q.levels == nil {
		q.levels = map[int]*runLevel{}
	}
	l := q.levels[j.Priority]
	if l == nil {
		l = &runLevel{}
		q.levels[j.Priority] = l
		q.priorities = append(q.priorities, j.Priority)
		slices.SortFunc(q.priorities, func(a, b int) int { return b - a })
	}
	for len(l.byRunning) <= j.running {
		l.byRunning = append(l.byRunning, fifo{})
	}
	f := &l.byRunning[j.running]
	q.pushes++
	f.entries = append(f.entries, queued{j, q.pushes})
	j.queuedAt, j.queuedAs = j.running, q.pushes
}

// pop removes and returns the job pick chooses, or nil if no job has work
// and a free worker slot.
func (q *runQueue) pop() *job {
	for _, p := range q.priorities {
		l := q.levels[p]
		for r := range l.byRunning {
			f := &l.byRunning[r]
			for f.head < len(f.entries) {
				e := f.entries[f.head]
				f.entries[f.head] = queued{}
				f.head++
				if f.head == len(f.entries) {
					f.entries, f.head = f.entries[:0], 0
				} else if f.head > 1024 && f.head*2 > len(f.entries) {
					f.entries, f.head = append(f.entries[:0], f.entries[f.head:]...), 0
				}
				if !e.current() {
					continue // stale
				}
				j := e.j
				j.queuedAt, j.queuedAs = notQueued, 0
				if !j.hasWork || j.running >= j.limit {
					continue
				}
				return j
			}
		}
	}
	return nil
}

// alongScan bounds how many entries beyond those it takes popAlong looks
// at, so that jobs that do not fit (another mode, other settings) cost a
// pick a bounded amount whatever the length of the queue.
const alongScan = 256

// popAlong removes and returns up to n jobs other than lead that fits
// accepts, in the order pop would take them: the jobs that go with lead in
// one transaction (see engine.along). Entries that do not fit stay where
// they are; those taken become stale, and are dropped when met.
func (q *runQueue) popAlong(lead *job, n int, fits func(*job) bool) []*job {
	var out []*job
	looked := 0
	for _, p := range q.priorities {
		l := q.levels[p]
		for r := range l.byRunning {
			f := &l.byRunning[r]
			for i := f.head; i < len(f.entries) && len(out) < n && looked < n+alongScan; i++ {
				e := f.entries[i]
				if !e.current() {
					continue // stale
				}
				looked++
				j := e.j
				if j == lead || !j.hasWork || j.running >= j.limit || !fits(j) {
					continue
				}
				j.queuedAt, j.queuedAs = notQueued, 0
				out = append(out, j)
			}
		}
	}
	return out
}
