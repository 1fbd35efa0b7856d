package pgtest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// ExampleTB returns a testing.TB for a runnable Example function, which has
// none: Fatal and Fatalf panic (the example then fails with the message),
// Error, Errorf, Log and Logf print to stderr, and cleanups run when Main
// finishes, newest first. Helper is a no-op; any other method panics, and
// the harness calls no other.
func ExampleTB() testing.TB { return exampleTB{} }

var (
	exampleCleanupMu sync.Mutex
	exampleCleanups  []func()
)

// exampleTB implements the methods listed at ExampleTB. The embedded
// interface is nil: any other method would panic.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                        {}
func (exampleTB) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (exampleTB) Error(args ...any)              { fmt.Fprintln(os.Stderr, args...) }
func (exampleTB) Errorf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
func (exampleTB) Log(args ...any)                { fmt.Fprintln(os.Stderr, args...) }
func (exampleTB) Logf(format string, a ...any)   { fmt.Fprintf(os.Stderr, format+"\n", a...) }
func (exampleTB) Cleanup(f func()) {
	exampleCleanupMu.Lock()
	defer exampleCleanupMu.Unlock()
	exampleCleanups = append(exampleCleanups, f)
}

// runExampleCleanups runs the cleanups registered through ExampleTB,
// newest first.
func runExampleCleanups() {
	exampleCleanupMu.Lock()
	fs := exampleCleanups
	exampleCleanups = nil
	exampleCleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
