package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// safeToRetry is an error pgx raises before anything was sent (see
// pgconn.SafeToRetry).
type safeToRetry struct{}

func (safeToRetry) Error() string     { return "not sent" }
func (safeToRetry) SafeToRetry() bool { return true }

func pgError(code string) error {
	return fmt.Errorf("statement: %w", &pgconn.PgError{Code: code, Message: "code " + code})
}

// connectError is a real connection refusal: pgconn's, to a port nobody
// listens on.
func connectError(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2&sslmode=disable")
	if conn != nil {
		_ = conn.Close(ctx)
	}
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, err, &connectErr)
	return err
}

// TestClassification: which errors are transient (Do repeats the operation
// after them) and which, after a COMMIT was sent, leave the outcome unknown
// (the caller asks Committed).
func TestClassification(t *testing.T) {
	for _, tt := range []struct {
		name             string
		err              error
		transient        bool
		mayHaveCommitted bool
	}{
		{"nil", nil, false, false},
		{"an error of the caller's", errors.New("handler failed"), false, false},
		{"no rows", pgx.ErrNoRows, false, false},

		// The server ended or refused the session: the request may have
		// been processed.
		{"admin shutdown", pgError("57P01"), true, true},
		{"crash shutdown", pgError("57P02"), true, true},
		{"cannot connect now", pgError("57P03"), true, true},
		{"idle session timeout", pgError("57P05"), true, true},
		{"idle in transaction timeout", pgError("25P03"), true, true},
		{"connection exception", pgError("08006"), true, true},
		{"connection failure", pgError("08001"), true, true},

		// The server reported on the statement: the transaction is aborted.
		{"query canceled", pgError("57014"), true, false},
		{"too many connections", pgError("53300"), true, false},
		{"serialization failure", pgError("40001"), true, false},
		{"deadlock", pgError("40P01"), true, false},
		{"read-only server", pgError("25006"), true, false},

		// About the request itself.
		{"syntax error", pgError("42601"), false, false},
		{"unique violation", pgError("23505"), false, false},
		{"bad password", pgError("28P01"), false, false},
		{"undefined table", pgError("42P01"), false, false},
		{"disk full", pgError("53100"), false, false},

		// The network, seen from the client.
		{"nothing sent", safeToRetry{}, true, false},
		{"nothing sent, wrapped", fmt.Errorf("claim: %w", safeToRetry{}), true, false},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, true},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), true, true},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true, true},
		{"eof", io.EOF, true, true},
		{"unexpected eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, true},
		{"closed network connection", net.ErrClosed, true, true},
		{"closed pgconn", pgconn.ErrConnClosed, true, true},
		{"pgx's own timeout while ctx is live", fmt.Errorf("read: %w", context.DeadlineExceeded), true, true},
		{"pgx's own cancel while ctx is live", context.Canceled, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			require.Equal(t, tt.transient, Transient(ctx, tt.err), "Transient(%v)", tt.err)
			require.Equal(t, tt.mayHaveCommitted, MayHaveCommitted(ctx, tt.err), "MayHaveCommitted(%v)", tt.err)

			// Once the caller's context is done, nothing is transient: the
			// error is the caller's cancellation, whatever it looks like.
			done, cancel := context.WithCancel(ctx)
			cancel()
			require.False(t, Transient(done, tt.err), "Transient after cancel (%v)", tt.err)
			require.False(t, MayHaveCommitted(done, tt.err), "MayHaveCommitted after cancel (%v)", tt.err)
		})
	}

	t.Run("connect error", func(t *testing.T) {
		err := connectError(t)
		require.True(t, Transient(context.Background(), err), "%v", err)
	})
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	transient := pgError("57P01")

	t.Run("repeats after transient errors", func(t *testing.T) {
		calls := 0
		var retries []int
		err := Do(OnRetry(ctx, func(err error, attempt int, wait time.Duration) {
			require.ErrorIs(t, err, transient)
			require.Positive(t, wait)
			retries = append(retries, attempt)
		}), func(context.Context) error {
			if calls++; calls < 3 {
				return transient
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, calls)
		require.Equal(t, []int{1, 2}, retries)
	})

	t.Run("returns other errors at once", func(t *testing.T) {
		calls := 0
		bad := pgError("23505")
		err := Do(ctx, func(context.Context) error { calls++; return bad })
		require.ErrorIs(t, err, bad)
		require.Equal(t, 1, calls)
	})

	t.Run("gives up when the budget is spent", func(t *testing.T) {
		calls := 0
		err := Do(WithBudget(ctx, 50*time.Millisecond), func(context.Context) error { calls++; return transient })
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, err, transient)
		require.Greater(t, calls, 1)
	})

	t.Run("stops when the context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		err := Do(OnRetry(ctx, func(error, int, time.Duration) { cancel() }), func(context.Context) error { return transient })
		require.ErrorIs(t, err, transient)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("budget", func(t *testing.T) {
		require.False(t, HasBudget(ctx))
		require.True(t, HasBudget(WithBudget(ctx, time.Second)))
	})
}

func TestBackoff(t *testing.T) {
	for range 1000 {
		d := jitter(100 * time.Millisecond)
		require.GreaterOrEqual(t, d, 50*time.Millisecond)
		require.Less(t, d, 150*time.Millisecond)
	}
	ctx := context.Background()
	var waits []time.Duration
	calls := 0
	err := Do(OnRetry(Eager(ctx), func(_ error, _ int, wait time.Duration) { waits = append(waits, wait) }), func(context.Context) error {
		if calls++; calls <= 6 {
			return pgError("40001")
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, waits, 6)
	for i, w := range waits {
		// minDelay doubled each time, capped for an eager context, ±50 %.
		base := min(minDelay<<i, eagerMaxDelay)
		require.GreaterOrEqual(t, w, base/2, "wait %d", i)
		require.Less(t, w, base*3/2, "wait %d", i)
	}
}
