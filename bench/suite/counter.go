package suite

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// ErrNotExactlyOnce is wrapped by the error of a measurement in which some
// unit of work (a slot, a River job, a pgbench row) ran twice or not at
// all: the figure of such a run is not comparable, so the run fails.
var ErrNotExactlyOnce = fmt.Errorf("not exactly once")

// counter counts the handler runs of each of n units of work, numbered
// from 0, so that a throughput figure is only quoted when every unit ran
// exactly once. Safe for concurrent use.
type counter struct {
	runs []atomic.Int32
	// outside counts runs of a number outside [0, n).
	outside atomic.Int64
}

func newCounter(n int) *counter { return &counter{runs: make([]atomic.Int32, n)} }

// ran records one run of unit k.
func (c *counter) ran(k int) {
	if k < 0 || k >= len(c.runs) {
		c.outside.Add(1)
		return
	}
	c.runs[k].Add(1)
}

// check returns an error wrapping ErrNotExactlyOnce, naming the first few
// offenders, unless every unit ran exactly once. what names the side
// measured ("almanac", "River", …).
func (c *counter) check(what string) error {
	var twice, never int
	var examples []string
	for k := range c.runs {
		switch n := c.runs[k].Load(); {
		case n == 1:
			continue
		case n == 0:
			never++
		default:
			twice++
		}
		if len(examples) < 3 {
			examples = append(examples, fmt.Sprintf("#%d ran %d times", k, c.runs[k].Load()))
		}
	}
	outside := c.outside.Load()
	if twice == 0 && never == 0 && outside == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: of %d units %d ran more than once, %d never ran, %d runs of unknown units (%s)",
		ErrNotExactlyOnce, what, len(c.runs), twice, never, outside, strings.Join(examples, ", "))
}
