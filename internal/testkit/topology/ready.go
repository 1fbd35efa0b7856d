//go:build linux

package topology

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitReady waits until check succeeds, d exits (an error with the end of
// its log) or ctx is done.
func waitReady(ctx context.Context, d *daemon, check func(context.Context) error) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(attempt)
		cancel()
		if err == nil {
			return nil
		}
		if d.exited() {
			return fmt.Errorf("topology: %s exited (%v):\n%s", d.name, d.err, d.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topology: %s not ready: %w (last error: %v)\n%s", d.name, ctx.Err(), err, d.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ping connects to url with the simple protocol (which works through every
// pooler mode) and runs SELECT 1.
func ping(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// freePort returns a port of 127.0.0.1 that was free a moment ago; the
// server that binds it may lose a race for it, so starts try again.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// withDefault gives ctx a deadline of d if it has none.
func withDefault(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
