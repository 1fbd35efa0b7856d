package acquire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestMisbehavingHandlers: every way a locked-mode handler can misbehave
// ends in a recorded outcome and a worker that goes on: its next run
// completes the next slot. Without the fixes, the first two cases hang the
// worker (the rollback waits for rows the handler never closed) and the
// last one blocks it for as long as the handler ignores its context.
func TestMisbehavingHandlers(t *testing.T) {
	cases := []struct {
		name    string
		handler func(f *fixture) Handler
		// outcome is what the misbehaving run reports; message a part of
		// the failure recorded on the slot ("" for a completion).
		outcome Outcome
		message string
	}{{
		name: "panic with open rows",
		handler: func(f *fixture) Handler {
			return func(ctx context.Context, tx pgx.Tx, s Slot) error {
				if err := writeEffect(ctx, tx, f.schema, s, "locked"); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, "SELECT generate_series(1, 1000)")
				if err != nil {
					return err
				}
				rows.Next()
				panic("boom")
			}
		},
		outcome: Failed, message: "panic: boom",
	}, {
		name: "error with an unread batch",
		handler: func(f *fixture) Handler {
			return func(ctx context.Context, tx pgx.Tx, s Slot) error {
				b := &pgx.Batch{}
				b.Queue(effect(f.schema), s.Start, s.Fence, "locked")
				b.Queue("SELECT 1")
				_ = tx.SendBatch(ctx, b)
				return errors.New("gave up")
			}
		},
		outcome: Failed, message: "gave up",
	}, {
		name: "commits through Exec",
		handler: func(f *fixture) Handler {
			return func(ctx context.Context, tx pgx.Tx, s Slot) error {
				_, err := tx.Exec(ctx, "COMMIT")
				return err
			}
		},
		outcome: Failed, message: "managed by almanac",
	}, {
		name: "rolls back through Exec",
		handler: func(f *fixture) Handler {
			return func(ctx context.Context, tx pgx.Tx, s Slot) error {
				if err := writeEffect(ctx, tx, f.schema, s, "locked"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "ROLLBACK")
				return err
			}
		},
		outcome: Failed, message: "managed by almanac",
	}, {
		name: "ignores its context",
		handler: func(f *fixture) Handler {
			return func(ctx context.Context, tx pgx.Tx, s Slot) error {
				if err := writeEffect(ctx, tx, f.schema, s, "locked"); err != nil {
					return err
				}
				select {} // never returns
			}
		},
		outcome: Failed, message: "did not return",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			q := f.queue(Options{Policy: Policy{MaxWork: 300 * time.Millisecond, Retry: fixedRetry(time.Hour)}})
			res, ok, _ := q.Run(ctx, c.handler(f))
			require.True(t, ok)
			require.Equal(t, c.outcome, res.Outcome, "%v", res.Err)
			r := f.row(f.slotStart(0))
			require.Equal(t, "AVAILABLE", r.Status)
			require.Equal(t, 1, r.FailCount, "the failure is recorded")
			require.Contains(t, *r.Message, c.message)
			require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE mode = 'locked'`), "the handler's writes are rolled back")

			// The worker goes on.
			res, ok, err := q.Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
				return writeEffect(ctx, tx, f.schema, s, "next")
			})
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, Completed, res.Outcome)
			require.True(t, res.Slot.Start.Equal(f.slotStart(1)))
		})
	}
}

// TestHandlerGoroutineOutlivesHandler: a goroutine the handler started and
// left running cannot use the slot's transaction once the handler returned:
// its statements are refused, and the slot's outcome is the handler's.
func TestHandlerGoroutineOutlivesHandler(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	late := make(chan error, 1)
	returned := make(chan struct{})
	res, _, err := f.queue(Options{}).Run(ctx, func(ctx context.Context, tx pgx.Tx, s Slot) error {
		go func() {
			<-returned
			_, err := tx.Exec(context.Background(), effect(f.schema), s.Start, s.Fence, "late")
			late <- err
		}()
		return writeEffect(ctx, tx, f.schema, s, "locked")
	})
	close(returned)
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome)
	require.ErrorIs(t, <-late, errHandlerReturned)
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
	require.Zero(t, f.count(`SELECT count(*) FROM {{schema}}.effect WHERE mode = 'late'`))
}

// TestMaxWorkOverrunCompleted: a handler that returns nil after MaxWork
// passed is completed (its transaction, and so its lock, held all along),
// and the overrun is written in the slot's message; one that returns an
// error after it is a failure naming MaxWork.
func TestMaxWorkOverrunCompleted(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	f := newFixture(t, 1)
	q := f.queueOn(pool, Options{Policy: Policy{MaxWork: 100 * time.Millisecond}})
	res, _, err := q.Run(context.Background(), func(ctx context.Context, tx pgx.Tx, s Slot) error {
		<-ctx.Done() // past MaxWork, then finish the work anyway
		return writeEffect(context.WithoutCancel(ctx), tx, f.schema, s, "locked")
	})
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome)
	require.Positive(t, res.Overrun)
	r := f.row(f.slotStart(0))
	require.Equal(t, "COMPLETE", r.Status)
	require.Contains(t, *r.Message, "after its MaxWork had passed")
	require.Equal(t, 1, f.count(`SELECT count(*) FROM {{schema}}.effect`))
}
