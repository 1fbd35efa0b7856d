package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStopClock: a wait of the job clients' clock ends at its time, or at
// once when the clock is hurried, as does every later wait.
func TestStopClock(t *testing.T) {
	c := newStopClock()
	received := func(ch <-chan time.Time) bool {
		select {
		case <-ch:
			return true
		case <-time.After(10 * time.Second): // a bound, not a measurement
			return false
		}
	}
	require.True(t, received(c.After(time.Millisecond)), "a short wait ends at its time")
	long := c.After(time.Hour)
	select {
	case <-long:
		t.Fatal("an hour's wait ended early")
	default:
	}
	c.hurry()
	require.True(t, received(long), "hurried")
	require.True(t, received(c.After(time.Hour)), "a wait after the hurry ends at once")
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.waits, "no wait is kept")
}
