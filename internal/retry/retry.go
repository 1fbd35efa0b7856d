// Package retry decides which database errors are transient and repeats an
// operation after them.
//
// A connection can die at any statement: a backend terminated by
// pg_terminate_backend, a server restarting or failing over, an
// idle_session_timeout, a pooler recycling its server connections, a stray
// cancel request. None of these says anything about the operation itself, so
// the engine repeats the operation on another connection, with jittered,
// bounded backoff, until it succeeds, fails for another reason, or the
// caller's context (or the budget attached to it with WithBudget) ends.
//
// Only operations that are safe to repeat go through Do: reads, and writes
// that are idempotent or whose effect is checked before they are repeated
// (see Committed). Deciding that is the caller's job.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable is wrapped by the error Do returns when it gives up on a
// transient fault: the database stayed unreachable (or kept dropping
// connections) for the whole budget.
var ErrUnavailable = errors.New("database unavailable")

// Backoff bounds: the first retry waits about minDelay, each next one twice
// as long, never more than maxDelay, each spread by ±50 % so that workers
// that lost their connections together do not reconnect in lockstep.
const (
	minDelay = 20 * time.Millisecond
	maxDelay = 2 * time.Second
)

// Transient reports whether err is a fault of the connection or the server,
// after which the same operation may succeed on another connection: the
// connection was lost or refused, the server is shutting down, starting up,
// recovering, full or read-only (a primary being demoted or fenced during a
// failover), the transaction lost a serialization or deadlock race, or a
// statement was cancelled while ctx is still live (a cancel request meant
// for an earlier statement, or a timeout of the server's).
// Errors after ctx is done, and errors about the request itself (bad SQL,
// constraint violations, authentication) are not transient.
func Transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientCode(pgErr.Code)
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// ctx is live, so a timeout of pgx's own: a connect timeout, or a
		// read deadline set after a cancel request went unanswered.
		return true
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// MayHaveCommitted reports whether err is a transient fault after which a
// transaction whose COMMIT was sent may have committed all the same: the
// connection went away while the request was (maybe) being processed.
// Errors the server reports for a statement (a serialization failure, a
// cancelled statement) abort the transaction, and errors raised before
// anything was sent leave nothing to wonder about.
func MayHaveCommitted(ctx context.Context, err error) bool {
	if !Transient(ctx, err) || pgconn.SafeToRetry(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "57014", "53300", "25006":
			return false
		}
	}
	return true
}

// transientCode lists the SQLSTATEs after which an operation may succeed if
// repeated.
func transientCode(code string) bool {
	switch code {
	case "57P01", // admin_shutdown: pg_terminate_backend, a fast shutdown
		"57P02", // crash_shutdown: another backend crashed
		"57P03", // cannot_connect_now: starting up, recovering, shutting down
		"57P05", // idle_session_timeout
		"25P03", // idle_in_transaction_session_timeout
		"57014", // query_canceled, while our context is live (see Transient)
		"53300", // too_many_connections: others may leave
		"25006", // read_only_sql_transaction: the write was refused; a fenced primary comes back, or another is promoted
		"40001", // serialization_failure: the transaction was rolled back
		"40P01": // deadlock_detected: likewise
		return true
	}
	return strings.HasPrefix(code, "08") // connection exceptions
}

// budgetKey carries the retry budget in a context.
type budgetKey struct{}

// WithBudget returns a context whose Do calls give up on transient faults
// after d of retrying (counted from the first failure of each call). Without
// a budget, Do retries until ctx is done. d <= 0 removes a budget.
func WithBudget(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, budgetKey{}, d)
}

// HasBudget reports whether ctx carries a retry budget.
func HasBudget(ctx context.Context) bool {
	_, ok := ctx.Value(budgetKey{}).(time.Duration)
	return ok
}

func budget(ctx context.Context) time.Duration {
	d, _ := ctx.Value(budgetKey{}).(time.Duration)
	return d
}

// eagerKey marks a context whose retries are not slowed down.
type eagerKey struct{}

// Eager returns a context whose Do calls retry at least every
// eagerMaxDelay: for writes that race other workers once the database is
// back, such as a lease holder recording its outcome after a failover.
func Eager(ctx context.Context) context.Context { return context.WithValue(ctx, eagerKey{}, true) }

// eagerMaxDelay caps the backoff of Eager contexts.
const eagerMaxDelay = 250 * time.Millisecond

// hookKey carries the function told about each retry.
type hookKey struct{}

// OnRetry returns a context whose Do calls call fn before each retry, with
// the error that caused it and the wait before it, for logging.
func OnRetry(ctx context.Context, fn func(err error, attempt int, wait time.Duration)) context.Context {
	return context.WithValue(ctx, hookKey{}, fn)
}

// Do runs op, and runs it again after each transient error (see Transient)
// until it succeeds, returns another error, ctx is done, or the budget
// attached to ctx is spent. op must be safe to repeat. When Do gives up on a
// transient fault it returns an error wrapping both ErrUnavailable and the
// last fault; when ctx ends while waiting it returns the last fault joined
// with ctx's error.
func Do(ctx context.Context, op func(ctx context.Context) error) error {
	limit := budget(ctx)
	hook, _ := ctx.Value(hookKey{}).(func(error, int, time.Duration))
	ceiling := maxDelay
	if eager, _ := ctx.Value(eagerKey{}).(bool); eager {
		ceiling = eagerMaxDelay
	}
	var first time.Time
	delay := minDelay
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if !Transient(ctx, err) {
			return err
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		wait := jitter(delay)
		if limit > 0 && now.Add(wait).Sub(first) > limit {
			return fmt.Errorf("%w after %d attempts in %s: %w", ErrUnavailable, attempt, now.Sub(first).Round(time.Millisecond), err)
		}
		if hook != nil {
			hook(err, attempt, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, ceiling)
	}
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}
