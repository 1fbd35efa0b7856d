// Command almanac is the command-line interface and sidecar of almanac:
// schema migrations, series registration, coverage reports and backfills,
// and running a command once per time slot. Run `almanac --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// Zone rules travel with the binary, so it computes slot boundaries even
	// on machines without a tz database (scratch and distroless images).
	// A system tz database, when present, is still preferred by Go.
	_ "time/tzdata"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal asks for a graceful stop; a second one means now.
		sig := <-signals
		signalNotice(sig, false)
		cancel()
		// Exiting kills the running commands of `almanac run`: each one's
		// supervisor sees the process end and kills everything it started.
		sig = <-signals
		signalNotice(sig, true)
		os.Exit(130)
	}()
	os.Exit(runInput(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
