package coverage

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/input"
)

// countingDB counts every statement and transaction a Client starts.
type countingDB struct {
	DB
	n atomic.Int64
}

func (d *countingDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	d.n.Add(1)
	return d.DB.BeginTx(ctx, opts)
}

func (d *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	d.n.Add(1)
	return d.DB.Exec(ctx, sql, args...)
}

func (d *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.n.Add(1)
	return d.DB.Query(ctx, sql, args...)
}

func (d *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.n.Add(1)
	return d.DB.QueryRow(ctx, sql, args...)
}

// TestReasonsAreCheckedBeforeAnySQL: a reason with invalid UTF-8 reached
// PostgreSQL and came back as a raw driver error, and a 1 MB reason was
// stored on every slot of the range. Reasons are refused with an error
// wrapping input.ErrReason before any statement runs.
func TestReasonsAreCheckedBeforeAnySQL(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, series(t, "reasons", "PT5M", "UTC", utc("2026-01-01T00:00:00Z")), Options{})
	from, to := utc("2026-03-01T00:00:00Z"), utc("2026-03-01T01:00:00Z")
	_, err := f.c.Materialize(ctx, from, to, WriteOptions{})
	require.NoError(t, err)
	f.exec(`UPDATE {{schema}}.slot SET status = 'COMPLETE'`)
	before := f.rows(from, to)

	db := &countingDB{DB: f.db.Pool}
	c, err := New(ctx, db, f.grid, Options{Schema: f.db.Schema})
	require.NoError(t, err)
	for _, bad := range []string{"bad\xffutf8", "nul\x00", "esc\x1b[2J", strings.Repeat("x", input.MaxReasonLen+1), "\u202eevil", "zero\u200bwidth"} {
		db.n.Store(0)
		_, err := c.Reopen(ctx, from, to, WriteOptions{Reason: bad})
		require.ErrorIs(t, err, input.ErrReason, "%q", bad)
		_, err = c.Skip(ctx, from, to, WriteOptions{Reason: bad})
		require.ErrorIs(t, err, input.ErrReason, "%q", bad)
		_, err = c.Materialize(ctx, to, to.Add(time.Hour), WriteOptions{Reason: bad})
		require.ErrorIs(t, err, input.ErrReason, "%q", bad)
		require.Zero(t, db.n.Load(), "%q: no statement ran", bad)
	}
	require.Equal(t, before, f.rows(from, to), "nothing was written")

	// The longest reason is stored whole; tabs and newlines are kept.
	long := strings.Repeat("é", input.MaxReasonLen/2-1) + "\t\n"
	res, err := c.Reopen(ctx, from, from.Add(5*time.Minute), WriteOptions{Reason: long})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Changed)
	require.Equal(t, long, *f.rows(from, to)[0].Message)
}
