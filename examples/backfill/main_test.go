package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/almanactest"
)

func TestMain(m *testing.M) { almanactest.Main(m) }

// TestBackfill: the late hour's twelve reports are recomputed exactly once
// and count the late readings; no other report is touched.
func TestBackfill(t *testing.T) {
	pool, schema := almanactest.Pool(t), almanactest.Schema(t)
	ctx := context.Background()
	var out bytes.Buffer
	require.NoError(t, run(ctx, pool, schema, &out))
	require.Contains(t, out.String(), "re-opened 12 windows: 12 available, 0 complete")
	require.Contains(t, out.String(), "recomputed 12 windows: 12 complete, 100% covered, 0 missing")

	s := pgx.Identifier{schema}.Sanitize()
	var twice, other, wrong int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+s+`.sensor_report WHERE computations = 2),
		(SELECT count(*) FROM `+s+`.sensor_report WHERE computations NOT IN (1, 2)),
		(SELECT count(*) FROM `+s+`.sensor_report r WHERE readings <> (SELECT count(*) FROM `+s+`.sensor_reading
			WHERE at >= r.window_start AND at < r.window_end))`).Scan(&twice, &other, &wrong))
	require.Equal(t, 12, twice, "the late hour's windows were recomputed once each")
	require.Zero(t, other)
	require.Zero(t, wrong, "every report, recomputed or not, counts its window's readings")
}
