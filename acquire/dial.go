package acquire

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connection settings applied by ConfigurePool.
const (
	// keepAlive is the TCP keepalive period of connections: a peer that
	// vanished (a lost host, a dropped route) is noticed in about three
	// periods instead of the two hours of Linux's defaults.
	keepAlive = 10 * time.Second
	// userTimeout bounds how long data may stay unacknowledged on a
	// connection before the kernel gives up on it (TCP_USER_TIMEOUT, Linux
	// only).
	userTimeout = 30 * time.Second
	// cancelGrace is how long a cancelled query may take to stop after the
	// cancel request before the connection is closed.
	cancelGrace = 5 * time.Second
	// idlePing is how long a pooled connection may sit idle before it is
	// pinged when acquired: a connection the server ended meanwhile
	// (pg_terminate_backend, idle_session_timeout, a restart) is then
	// replaced instead of failing the next statement.
	idlePing = time.Second
)

// cancelSentKey names the flag, in a connection's CustomData, that a cancel
// request was sent for one of its statements.
const cancelSentKey = "almanac.cancel_sent"

// ConfigurePool adjusts a pool configuration for almanac's workers:
//
//   - TCP keepalives every 10 s and a TCP_USER_TIMEOUT of 30 s (Linux), so
//     the worker notices a dead server or network in seconds instead of the
//     two hours of Linux's defaults;
//   - a connection idle for more than a second is pinged before it is handed
//     out, and replaced if the server ended it meanwhile;
//   - a cancelled context cancels the running query with a cancel request
//     and keeps the connection, instead of closing it (pgx's default). In
//     locked mode that keeps the slot's transaction alive when a handler
//     overruns MaxWork or the worker shuts down, so the outcome is recorded
//     with the handler's writes rolled back. A cancel request is delivered
//     asynchronously and may arrive after the statement it was meant for
//     has finished, so a connection that had one is closed when it is
//     released instead of going back to the pool, where the late cancel
//     could end another caller's statement.
//
// It is optional: without it almanac is still correct, but a handler
// timeout costs the connection and its outcome is recorded separately.
func ConfigurePool(cfg *pgxpool.Config) {
	dialer := &net.Dialer{KeepAlive: keepAlive, Timeout: 10 * time.Second, Control: setUserTimeout}
	cfg.ConnConfig.DialFunc = dialer.DialContext
	cfg.ConnConfig.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
		sent := &atomic.Bool{}
		conn.CustomData()[cancelSentKey] = sent
		return &trackedCancel{
			CancelRequestContextWatcherHandler: &pgconn.CancelRequestContextWatcherHandler{Conn: conn, DeadlineDelay: cancelGrace},
			sent:                               sent,
		}
	}
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > idlePing }
	afterRelease := cfg.AfterRelease
	cfg.AfterRelease = func(conn *pgx.Conn) bool {
		if sent, _ := conn.PgConn().CustomData()[cancelSentKey].(*atomic.Bool); sent != nil && sent.Load() {
			return false
		}
		return afterRelease == nil || afterRelease(conn)
	}
}

// trackedCancel is pgx's cancel-request handler that also records that a
// cancel request went out on its connection.
type trackedCancel struct {
	*pgconn.CancelRequestContextWatcherHandler
	sent *atomic.Bool
}

func (h *trackedCancel) HandleCancel(ctx context.Context) {
	h.sent.Store(true)
	h.CancelRequestContextWatcherHandler.HandleCancel(ctx)
}
