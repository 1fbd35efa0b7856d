package main

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/almanactest"
)

func TestMain(m *testing.M) { almanactest.Main(m) }

// TestReport runs three instances at once; every due window is reported
// exactly once, with the right count.
func TestReport(t *testing.T) {
	pool, schema := almanactest.Pool(t), almanactest.Schema(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = run(ctx, pool, schema, true, io.Discard) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	s := pgx.Identifier{schema}.Sanitize()
	var slots, complete, reports, wrong, recomputed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+s+`.slot),
		(SELECT count(*) FROM `+s+`.slot WHERE status = 'COMPLETE'),
		(SELECT count(*) FROM `+s+`.sensor_report),
		(SELECT count(*) FROM `+s+`.sensor_report r WHERE readings <> (SELECT count(*) FROM `+s+`.sensor_reading
			WHERE at >= r.window_start AND at < r.window_end)),
		(SELECT count(*) FROM `+s+`.sensor_report WHERE computations <> 1)`).
		Scan(&slots, &complete, &reports, &wrong, &recomputed))
	require.GreaterOrEqual(t, slots, hours*12-2)
	require.Equal(t, slots, complete)
	require.Equal(t, slots, reports, "one report per window")
	require.Zero(t, wrong, "every report counts its window's readings")
	require.Zero(t, recomputed, "no window was computed twice")
}
