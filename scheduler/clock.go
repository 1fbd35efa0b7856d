package scheduler

import (
	"fmt"
	"runtime/debug"
	"time"
)

// Clock is the scheduler's time source, replaced in tests so schedules can
// be checked without waiting. Lease deadlines and retry backoff never use
// it: they live on the database clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// panicError turns a recovered panic into an error carrying the stack.
func panicError(p any) error { return fmt.Errorf("panic: %v\n%s", p, debug.Stack()) }
