package pgtest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Example returns a freshly migrated schema for a runnable Example function,
// which has no testing.TB. It panics if no database can be had (the example
// then fails with the harness's message), and the schema is dropped when
// Main finishes.
func Example() *DB { return New(exampleTB{}) }

var (
	exampleCleanupMu sync.Mutex
	exampleCleanups  []func()
)

// exampleTB is the part of testing.TB the harness uses. The embedded
// interface is nil: any other method would panic, which the harness never
// calls.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                        {}
func (exampleTB) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (exampleTB) Errorf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "pgtest: "+format+"\n", a...)
}
func (exampleTB) Cleanup(f func()) {
	exampleCleanupMu.Lock()
	defer exampleCleanupMu.Unlock()
	exampleCleanups = append(exampleCleanups, f)
}

// runExampleCleanups runs the cleanups of Example schemas, newest first.
func runExampleCleanups() {
	exampleCleanupMu.Lock()
	defer exampleCleanupMu.Unlock()
	for i := len(exampleCleanups) - 1; i >= 0; i-- {
		exampleCleanups[i]()
	}
	exampleCleanups = nil
}
