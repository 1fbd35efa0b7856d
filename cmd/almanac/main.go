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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
