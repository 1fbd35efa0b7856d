package suite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Slots that did not run within the wait count as later than any that
// did: a percentile that falls on them is the limit, flagged as capped.
func TestScaleBoundary(t *testing.T) {
	run := &scaleRun{tenants: 100}
	latencies := make([]float64, 100)
	for i := range latencies {
		latencies[i] = float64(i+1) / 10 // 0.1 s … 10 s
	}
	run.boundary(latencies, time.Minute)
	require.Equal(t, []float64{5}, run.p50)
	require.Equal(t, []float64{9.9}, run.p99)
	require.False(t, run.capped)
	require.Equal(t, 100, run.within10)
	require.Equal(t, 100, run.withinLimit)

	run.boundary(latencies[:98], time.Minute) // 2 of 100 never ran
	require.Equal(t, []float64{9.9, 60}, run.p99)
	require.Equal(t, []float64{5, 5}, run.p50)
	require.True(t, run.capped)
	require.Equal(t, 200, run.due)
	require.Equal(t, 198, run.within10)
}

func TestRunRecorder(t *testing.T) {
	var r runRecorder
	due := time.Unix(1_700_000_040, 0)
	r.watch(due)
	r.ran(1, due, due.Add(1500*time.Millisecond))
	r.ran(2, due.Add(-time.Minute), due) // another boundary's: counted, not recorded
	r.ran(1, due, due.Add(2*time.Second))
	recorded, total := r.count()
	require.Equal(t, 2, recorded)
	require.EqualValues(t, 3, total)
	m := r.report()
	require.Equal(t, []float64{1.5, 2}, m.Latencies)
	require.Equal(t, 1, m.Distinct, "tenant 1 ran twice")
}
