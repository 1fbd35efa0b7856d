package almanac_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// statementCounter is a pgx tracer that counts the statements a pool runs.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestClientRefusesBadInputBeforeSQL: reasons and series names that cannot
// be stored faithfully are refused by the Client with an error wrapping
// ErrInvalid before any statement runs.
func TestClientRefusesBadInputBeforeSQL(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	c, err := almanac.New(pool, almanac.Options{Schema: db.Schema})
	require.NoError(t, err)
	s, err := c.Series(ctx, "report", "PT5M", almanac.SeriesOptions{})
	require.NoError(t, err)
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)

	counter.n.Store(0)
	for _, bad := range []string{"bad\xff", "nul\x00", strings.Repeat("r", input.MaxReasonLen+1), "\u202eevil"} {
		_, err := c.Reopen(ctx, s, from, to, almanac.WriteOptions{Reason: bad})
		require.ErrorIs(t, err, almanac.ErrInvalid, "%q", bad)
		_, err = c.Skip(ctx, s, from, to, almanac.WriteOptions{Reason: bad})
		require.ErrorIs(t, err, almanac.ErrInvalid, "%q", bad)
	}
	for _, bad := range []string{"report\u200b", "\u202etroper", "a\u2028b"} {
		_, err := c.Series(ctx, bad, "PT5M", almanac.SeriesOptions{})
		require.ErrorIs(t, err, input.ErrName, "%q", bad)
	}
	_, err = c.Series(ctx, "ancient", "P8000Y", almanac.SeriesOptions{})
	require.ErrorIs(t, err, almanac.ErrInvalid)
	require.ErrorContains(t, err, "invalid interval")
	require.Zero(t, counter.n.Load(), "no statement ran")
}
