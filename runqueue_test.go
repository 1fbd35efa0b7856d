package almanac

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunQueueOrder: pick takes the highest priority first, then the job
// with the fewest running workers, then the one that got work first; a job
// at its limit or without work is not taken, and a job is never handed out
// twice for one queueing.
func TestRunQueueOrder(t *testing.T) {
	e := &engine{opts: Options{Concurrency: 100}}
	mk := func(name string, priority, limit int) *job {
		j := &job{limit: limit, queuedAt: notQueued}
		j.Priority = priority
		j.Series = series(t, name, "PT1M")
		return j
	}
	a, b, c, hi := mk("a", 0, 2), mk("b", 0, 2), mk("c", 0, 1), mk("hi", 1, 1)
	give := func(j *job) {
		j.hasWork = true
		e.ready.push(j)
	}
	take := func() string {
		j := e.pick()
		if j == nil {
			return ""
		}
		j.running++
		e.running++
		e.ready.push(j)
		return j.Series.Name()
	}
	give(b)
	give(a)
	give(c)
	give(hi)
	give(a) // queued already: no second entry
	// hi first (priority), then b, a, c in the order they got work (all
	// idle), then b and a again, in the order they were queued with one
	// worker each (c is at its limit).
	var order []string
	for name := take(); name != ""; name = take() {
		order = append(order, name)
	}
	require.Equal(t, []string{"hi", "b", "a", "c", "b", "a"}, order)

	// A worker of c ends with no more work: c is not taken again; a worker
	// of a ends while a still has work: a goes before b, which runs two.
	c.running--
	c.hasWork = false
	e.ready.push(c)
	a.running--
	e.ready.push(a)
	require.Equal(t, "a", take())
	require.Equal(t, "", take())

	// Many jobs with one slot each: every one is taken once, in the order
	// they got work.
	e = &engine{opts: Options{Concurrency: 1 << 20}}
	var want, got []string
	for i := range 1000 {
		j := mk(fmt.Sprintf("s%04d", i), 0, 10)
		give(j)
		want = append(want, j.Series.Name())
	}
	for range 1000 {
		j := e.pick()
		require.NotNil(t, j)
		got = append(got, j.Series.Name())
		j.hasWork = false // its one slot
	}
	require.Equal(t, want, got)
	require.Nil(t, e.pick())
}

// TestRunQueuePopAlong: popAlong takes the jobs that fit in the order pop
// would, leaves the others where they are, never takes the lead, and a job
// it took is not handed out again by pop for that queueing, nor ahead of
// the jobs queued before it once its batch ends and it is queued again.
func TestRunQueuePopAlong(t *testing.T) {
	e := &engine{opts: Options{Concurrency: 100}}
	var jobs []*job
	for i := range 6 {
		j := &job{limit: 2, queuedAt: notQueued, hasWork: true}
		j.Series = series(t, fmt.Sprintf("p%d", i), "PT1M")
		if i%2 == 1 {
			j.Batch = 10
		}
		j.mode = j.Job.mode()
		e.ready.push(j)
		jobs = append(jobs, j)
	}
	lead := jobs[1]
	batched := func(j *job) bool { return j.mode == modeBatch }
	along := e.ready.popAlong(lead, 5, batched)
	require.Equal(t, []*job{jobs[3], jobs[5]}, along, "the batched jobs but the lead, in order")
	for _, j := range along {
		j.running++ // as dispatch counts them
	}
	var popped []string
	for j := e.pick(); j != nil; j = e.pick() {
		popped = append(popped, j.Series.Name())
	}
	require.Equal(t, []string{"p0", "p1", "p2", "p4"}, popped, "the others stayed in place; those taken along are not queued")

	// The next round: p1 leads again and takes p3 along, whose entries of
	// the first round are left behind; p5 stays queued. When the batch
	// ends, p3 is queued again at the same running count, behind p5: the
	// entry left behind must not put it first.
	for _, j := range jobs {
		j.running = 0
		j.queuedAt, j.queuedAs = notQueued, 0
	}
	e.ready = runQueue{}
	for _, i := range []int{1, 3, 5} {
		e.ready.push(jobs[i])
	}
	require.Equal(t, jobs[1], e.pick())
	require.Equal(t, []*job{jobs[3]}, e.ready.popAlong(jobs[1], 1, batched))
	for _, j := range []*job{jobs[1], jobs[3]} {
		j.running++
	}
	for _, j := range []*job{jobs[1], jobs[3]} {
		j.running--
		e.ready.push(j) // the batch ended
	}
	popped = nil
	for j := e.pick(); j != nil; j = e.pick() {
		popped = append(popped, j.Series.Name())
		j.hasWork = false
	}
	require.Equal(t, []string{"p5", "p1", "p3"}, popped, "in the order they were queued")
}
