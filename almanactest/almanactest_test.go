package almanactest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/almanactest"
	"github.com/almanacdev/almanac/slot"
)

func TestMain(m *testing.M) { almanactest.Main(m) }

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, almanactest.Pool(t).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists))
	return exists
}

func TestClientHasAMigratedSchemaOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := almanactest.Client(t, almanac.Options{})
	b := almanactest.Client(t, almanac.Options{})
	require.NoError(t, a.RequireMigrated(ctx))
	_, err := a.Series(ctx, "reports", "PT1H", almanac.SeriesOptions{TimeZone: "UTC"})
	require.NoError(t, err)
	inB, err := b.ListSeries(ctx)
	require.NoError(t, err)
	require.Empty(t, inB, "each client has a schema of its own")

	// A given schema is migrated, and dropped by Schema's cleanup.
	var given string
	t.Run("given schema", func(t *testing.T) {
		given = almanactest.Schema(t)
		c := almanactest.Client(t, almanac.Options{Schema: given})
		require.NoError(t, c.RequireMigrated(ctx))
		var tables int
		require.NoError(t, almanactest.Pool(t).QueryRow(ctx,
			"SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('slot', 'series')", given).Scan(&tables))
		require.Equal(t, 2, tables)
	})
	require.False(t, schemaExists(t, given), "dropped when the test is done")
}

func TestClientIsStoppedBeforeItsSchemaIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c *almanac.Client
	t.Run("starts", func(t *testing.T) {
		c = almanactest.Client(t, almanac.Options{PollInterval: time.Hour})
		s, err := c.Series(ctx, "ticks", "PT1H", almanac.SeriesOptions{TimeZone: "UTC"})
		require.NoError(t, err)
		require.NoError(t, c.Register(almanac.Job{Series: s, Handler: func(context.Context, pgx.Tx, almanac.Slot) error { return nil }}))
		require.NoError(t, c.Start(ctx))
	})
	require.ErrorIs(t, c.Stop(ctx), almanac.ErrNotStarted, "stopped by the cleanup")
}

// fakeTB records a Fatal instead of failing the real test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs fn with a fakeTB and returns what it was failed with.
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.fatal
}

func TestRequireStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := almanactest.Client(t, almanac.Options{})
	s, err := c.Series(ctx, "hourly", "PT1H", almanac.SeriesOptions{TimeZone: "UTC"})
	require.NoError(t, err)
	at := func(i int) time.Time { return time.Date(2026, 3, 1, i, 0, 0, 0, time.UTC) }
	require.NoError(t, c.Register(almanac.Job{
		Series: s, From: at(0), To: at(3),
		Handler: func(_ context.Context, _ pgx.Tx, sl almanac.Slot) error {
			switch sl.Start.Hour() {
			case 1:
				return almanac.Skip("holiday")
			case 2:
				return errors.New("no input")
			}
			return nil
		},
		Policy: almanac.Policy{MaxAttempts: 1},
	}))
	_, err = c.Drain(ctx)
	require.ErrorIs(t, err, almanac.ErrIncomplete, "the parked slot")

	almanactest.RequireStatus(t, c, s, at(0), almanac.StatusComplete)
	almanactest.RequireStatus(t, c, s, at(0).Add(30*time.Minute), almanac.StatusComplete) // any time in the slot
	almanactest.RequireStatus(t, c, s, at(1), almanac.StatusSkip)
	almanactest.RequireStatus(t, c, s, at(2), almanactest.Parked)
	almanactest.RequireStatus(t, c, s, at(3), almanactest.Missing)

	msg := fatalOf(t, func(tb testing.TB) { almanactest.RequireStatus(tb, c, s, at(2), almanac.StatusAvailable) })
	require.Regexp(t, `^almanactest: slot 2026-03-01T02:00:00Z/PT1H of series hourly is PARKED \(attempts 1, fence [1-3], message "gave up after 1 failure: no input"\), want AVAILABLE$`, msg)
	msg = fatalOf(t, func(tb testing.TB) { almanactest.RequireStatus(tb, c, s, at(3), almanac.StatusComplete) })
	require.Equal(t, `almanactest: slot 2026-03-01T03:00:00Z/PT1H of series hourly is MISSING, want COMPLETE`, msg)

	other, err := slot.NewSeries("unregistered", mustInterval("PT1H"), time.UTC, time.Time{})
	require.NoError(t, err)
	msg = fatalOf(t, func(tb testing.TB) { almanactest.RequireStatus(tb, c, other, at(0), almanac.StatusComplete) })
	require.Contains(t, msg, "almanactest: read the slot of series unregistered at 2026-03-01T00:00:00Z: ")
}
