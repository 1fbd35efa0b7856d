package scheduler

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/almanacdev/almanac/internal/wake"
)

// listen wakes jobs when their slots become acquirable (materialize,
// re-open, retry), on a dedicated connection outside the pool so it never
// takes a worker's connection. After a lost connection it reconnects with
// backoff and wakes every job, since notifications sent meanwhile are lost.
// Behind a pooler in transaction mode LISTEN does not work; the poll
// interval then does the waking.
func (s *Scheduler) listen(ctx context.Context) {
	byKey := map[key]*job{}
	for _, j := range s.jobs {
		byKey[j.key()] = j
	}
	channel := wake.Channel(s.opts.Schema)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		cfg := s.pool.Config().ConnConfig.Copy()
		// Waiting for a notification runs no query a cancel request could
		// end: on shutdown, interrupt the read at once rather than wait for
		// the grace a cancelling handler (acquire.ConfigurePool) would give.
		cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
		}
		if err == nil {
			backoff = 100 * time.Millisecond
			s.wakeAll() // whatever happened while we were not listening
			err = s.receive(ctx, conn, byKey)
		}
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		if ctx.Err() != nil {
			return
		}
		s.opts.Logger.Warn("almanac: listening for wake-ups failed; polling meanwhile", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (s *Scheduler) receive(ctx context.Context, conn *pgx.Conn, byKey map[key]*job) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		ev, err := wake.Parse(n.Payload)
		if err != nil {
			continue // not ours
		}
		if ev.Name == "" {
			s.wakeAll() // a plain SQL insert, of any series
			continue
		}
		if j := byKey[key{ev.Name, ev.Interval}]; j != nil {
			s.wake(j)
		}
	}
}
