package suite

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMedianAndPercentile(t *testing.T) {
	require.Equal(t, 0.0, median(nil))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	xs := make([]float64, 200)
	for i := range xs {
		xs[i] = float64(200 - i)
	}
	require.Equal(t, 198.0, percentile(xs, 99))
	require.Equal(t, 100.0, percentile(xs, 50))
	require.Equal(t, 0.0, percentile(nil, 99))
}

func TestRowRatioIsTheMedianOfPairedRatios(t *testing.T) {
	r := newRow("x", "x", Figure{Unit: SlotsPerSecond}, Figure{Unit: SlotsPerSecond}, []float64{10, 20, 30}, []float64{10, 10, 60}, &Bar{AtLeast: true, Value: 0.9})
	require.Equal(t, 20.0, r.Engine.Value)
	require.Equal(t, 10.0, r.Baseline.Value)
	require.Equal(t, 1.0, r.Ratio, "ratios 1, 2 and 0.5")
	r.judge()
	require.Equal(t, Pass, r.Result)
}

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		row  Row
		want Result
		note string
	}{
		{Row{Ratio: 0.05, Bar: &Bar{Value: 0.1}}, Pass, ""},
		{Row{Ratio: 0.2, Bar: &Bar{Value: 0.1}}, Miss, ""},
		{Row{Ratio: 1.2, Bar: &Bar{AtLeast: true, Value: 1.5}}, Miss, ""},
		{Row{Ratio: 40, Engine: Figure{Value: 101, Unit: Milliseconds}, Bar: &Bar{OnEngine: true, Value: 100}}, Miss, ""},
		{Row{Ratio: 3}, Info, ""},
		// An engine side that could not be measured (it did not start in
		// time) misses a bar on its figure.
		{Row{Engine: Figure{Unit: TransactionsPerSecond}, Bar: &Bar{OnEngine: true, Value: 100}}, Miss, ""},
		{Row{Engine: Figure{Value: 12, Unit: TransactionsPerSecond, Samples: []float64{12}}, Bar: &Bar{OnEngine: true, Value: 30}}, Pass, ""},
	} {
		c.row.judge()
		require.Equal(t, c.want, c.row.Result, "%+v", c.row)
		require.Equal(t, c.note, c.row.Note)
	}
}

// A pair whose baseline is 0 (River idle, a memory difference of nothing)
// has no ratio, rather than an infinite one that JSON cannot carry.
func TestRatioSkipsZeroBaselines(t *testing.T) {
	require.Equal(t, 2.0, pairedRatio([]float64{4, 5, 6}, []float64{2, 0, -1}))
	require.Equal(t, 0.0, pairedRatio([]float64{4}, []float64{0}))
	require.Equal(t, "4559×", formatRatio(4559.47))
	require.Equal(t, "1.50×", formatRatio(1.5))
	require.Equal(t, "0.050×", formatRatio(0.05))
}

func TestWriteTable(t *testing.T) {
	rep := Report{Rows: []Row{
		{ID: "a", Name: "gaps", Engine: Figure{Label: "almanac", Value: 106, Unit: Milliseconds, Samples: []float64{100, 106, 112}},
			Baseline: Figure{Label: "anti-join", Value: 1733, Unit: Milliseconds, Samples: []float64{1733}}, Ratio: 0.0612, Bar: &Bar{Value: 0.1}, Result: Pass},
		{ID: "b", Name: "vs River", Engine: Figure{Label: "almanac", Value: 67_349, Unit: SlotsPerSecond, Samples: []float64{67_349}},
			Baseline: Figure{Label: "River", Unit: SlotsPerSecond}, Bar: &Bar{AtLeast: true, Value: 2}, Result: Skipped, Note: "no go command"},
	}, Notes: []string{"a run note"}}
	var b strings.Builder
	require.NoError(t, rep.WriteTable(&b))
	out := b.String()
	for _, want := range []string{"106 ms", "anti-join 1733 ms", "0.061×", "≤ 0.10×", "pass",
		"67.3k slots/s", "River —", "≥ 2.00×", "skipped", "b: no go command", "a run note", "pgbench ceiling", "±6%"} {
		require.Contains(t, out, want)
	}
}

func TestWiden(t *testing.T) {
	msg := "m"
	args := widen([]any{"name", []string{"COMPLETE"}, []*string{&msg}, []int64{7, 8}, 3}, 1, 3)
	require.Equal(t, "name", args[0])
	require.Equal(t, []string{"COMPLETE", "COMPLETE", "COMPLETE"}, args[1])
	require.Equal(t, []*string{&msg, &msg, &msg}, args[2])
	require.Equal(t, []int64{7, 8}, args[3], "only arrays of the captured batch's size are widened")
	require.Equal(t, 3, args[4])
}

func TestCount(t *testing.T) {
	require.Equal(t, "1M", count(1_000_000))
	require.Equal(t, "20k", count(20_000))
	require.Equal(t, "300", count(300))
	require.Equal(t, "1500", count(1_500))
	require.Equal(t, time.Date(2020, 1, 1, 0, 2, 0, 0, time.UTC), at(2))
}

func TestCounterFailsLoudly(t *testing.T) {
	c := newCounter(3)
	c.ran(0)
	c.ran(1)
	c.ran(2)
	require.NoError(t, c.check("x"))
	c.ran(1)
	err := c.check("x")
	require.ErrorIs(t, err, ErrNotExactlyOnce)
	require.Contains(t, err.Error(), "1 ran more than once, 0 never ran")
	c = newCounter(2)
	c.ran(0)
	c.ran(5)
	require.ErrorContains(t, c.check("River"), "River: of 2 units 0 ran more than once, 1 never ran, 1 runs of unknown units")
}
