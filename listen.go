package almanac

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/almanacdev/almanac/internal/wake"
)

// listenProbeTimeout bounds the wait for the listener's own test
// notification; listenRecheck is how long a listener that got none waits
// before it tries again (a busy server may have been slow, a pooler will
// fail again).
const (
	listenProbeTimeout = 5 * time.Second
	listenRecheck      = 10 * time.Minute
)

// listen wakes jobs when their slots become acquirable (materialize,
// re-open, retry), on a dedicated connection outside the pool so it never
// takes a worker's connection. After a lost connection it reconnects with
// backoff and scans for work (one statement), since notifications sent
// meanwhile are lost.
//
// Behind a pooler in transaction mode LISTEN "succeeds" and then never
// delivers, because the session that listens is handed to other clients
// between transactions. So after each LISTEN the listener sends itself a
// notification through the pool: if it does not arrive, it says once that
// wake-ups fall back to polling (every PollInterval) and how to fix it (a
// direct connection for listening, Options.ListenURL), and tries again much
// later.
func (e *engine) listen(ctx context.Context) {
	channel := wake.Channel(e.opts.Schema)
	backoff := 100 * time.Millisecond
	warned := false
	for ctx.Err() == nil {
		cfg := e.pool.Config().ConnConfig.Copy()
		if e.listenTo != nil {
			cfg = e.listenTo.Copy()
		}
		// Waiting for a notification runs no query a cancel request could
		// end: on shutdown, interrupt the read at once rather than wait for
		// the grace a cancelling handler (acquire.ConfigurePool) would give.
		cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize(), pgx.QueryExecModeSimpleProtocol)
		}
		delivered := false
		if err == nil {
			delivered, err = e.probeListen(ctx, conn, channel)
		}
		if err == nil && !delivered {
			_ = conn.Close(context.WithoutCancel(ctx))
			if !warned {
				warned = true
				e.opts.Logger.Warn("almanac: LISTEN does not deliver wake-ups through this connection (a pooler in transaction mode?); idle workers poll instead; give a direct connection for listening (Options.Listen, almanac run --listen-url)",
					"poll_interval", e.opts.PollInterval)
			}
			select {
			case <-ctx.Done():
				return
			case <-e.opts.Clock.After(listenRecheck):
			}
			continue
		}
		if err == nil {
			backoff = 100 * time.Millisecond
			e.requestScan() // whatever happened while we were not listening
			err = e.receive(ctx, conn)
		}
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		if ctx.Err() != nil {
			return
		}
		e.opts.Logger.Warn("almanac: listening for wake-ups failed; polling meanwhile", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// probeListen sends a notification to channel through the pool and reports
// whether conn, which listens on it, receives it within
// listenProbeTimeout. Wake-ups that arrive meanwhile are acted on.
func (e *engine) probeListen(ctx context.Context, conn *pgx.Conn, channel string) (bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	payload := `{"probe":"` + hex.EncodeToString(b) + `"}`
	// The simple protocol leaves no prepared statement on a pooler's
	// shared server connections.
	if _, err := e.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, pgx.QueryExecModeSimpleProtocol, channel, payload); err != nil {
		return false, err
	}
	wait, cancel := context.WithTimeout(ctx, listenProbeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wait)
		switch {
		case err != nil && ctx.Err() == nil && wait.Err() != nil:
			return false, nil // timed out: nothing was delivered
		case err != nil:
			return false, err
		case n.Payload == payload:
			return true, nil
		}
		e.notified(n)
	}
}

func (e *engine) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		e.notified(n)
	}
}

// notified wakes the job a notification is about, if any; for a
// notification that names no series (a plain SQL insert, of any series)
// it asks for a scan, which wakes the jobs that have work.
func (e *engine) notified(n *pgconn.Notification) {
	ev, err := wake.Parse(n.Payload)
	if err != nil {
		return // not ours
	}
	if ev.Name == "" {
		e.requestScan()
		return
	}
	if j := e.byKey[key{ev.Name, ev.Interval}]; j != nil {
		e.wake(j)
	}
}
