package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/slot"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func series(t *testing.T, name, interval string) slot.Series {
	t.Helper()
	s, err := slot.NewSeries(name, mustInterval(interval), time.UTC, time.Time{})
	require.NoError(t, err)
	return s
}

func count(t *testing.T, db *pgtest.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sqlschema.Render(sql, db.Schema), args...).Scan(&n))
	return n
}
