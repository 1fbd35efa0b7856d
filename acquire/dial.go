package acquire

import (
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connection settings applied by ConfigurePool.
const (
	// KeepAlive is the TCP keepalive period of connections: a peer that
	// vanished (a lost host, a dropped route) is noticed in about three
	// periods instead of the two hours of Linux's defaults.
	KeepAlive = 10 * time.Second
	// UserTimeout bounds how long data may stay unacknowledged on a
	// connection before the kernel gives up on it (TCP_USER_TIMEOUT, Linux
	// only).
	UserTimeout = 30 * time.Second
	// cancelGrace is how long a cancelled query may take to stop after the
	// cancel request before the connection is closed.
	cancelGrace = 5 * time.Second
)

// ConfigurePool adjusts a pool configuration for almanac's workers:
//
//   - TCP keepalives every KeepAlive and TCP_USER_TIMEOUT of UserTimeout, so
//     the worker notices a dead server or network in seconds;
//   - a cancelled context cancels the running query with a cancel request
//     and keeps the connection, instead of closing it (pgx's default). In
//     locked mode that keeps the slot's transaction alive when a handler
//     overruns MaxWork or the worker shuts down, so the outcome is recorded
//     with the handler's writes rolled back.
//
// It is optional: without it almanac is still correct, but a handler
// timeout costs the connection and its outcome is recorded separately.
func ConfigurePool(cfg *pgxpool.Config) {
	dialer := &net.Dialer{KeepAlive: KeepAlive, Timeout: 10 * time.Second, Control: setUserTimeout}
	cfg.ConnConfig.DialFunc = dialer.DialContext
	cfg.ConnConfig.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: conn, DeadlineDelay: cancelGrace}
	}
}
