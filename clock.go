package almanac

import (
	"fmt"
	"runtime/debug"
	"time"
)

// Clock is the time source of a Client's jobs (Options.Clock), replaced in
// tests so that schedules can be checked without waiting. It times waits
// only: what is due, lease deadlines and retry backoff live on the database
// clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// panicError turns a recovered panic into an error carrying the stack.
func panicError(p any) error { return fmt.Errorf("panic: %v\n%s", p, debug.Stack()) }
