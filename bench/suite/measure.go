package suite

import (
	"context"
	"math"
	"slices"
)

// measurement measures one side once, on a table it prepares itself, and
// returns the figure.
type measurement func(ctx context.Context) (float64, error)

// interleave measures every side e.repeats times, round-robin, and returns
// the samples of each side in the order they were taken. The side that goes
// first rotates between repeats, so none always gets the warmer cache or
// the quieter moment. A nil side is not measured (its samples stay empty).
func (e *env) interleave(ctx context.Context, sides ...measurement) ([][]float64, error) {
	out := make([][]float64, len(sides))
	for i := range e.repeats {
		for j := range sides {
			k := (i + j) % len(sides)
			if sides[k] == nil {
				continue
			}
			v, err := sides[k](ctx)
			if err != nil {
				return nil, err
			}
			out[k] = append(out[k], v)
			e.advance()
		}
	}
	return out, nil
}

// newRow returns the row of an engine and its baseline: medians of both
// sides and the median of the per-repeat ratios, with its bar (nil for
// none); Run judges it.
func newRow(id, name string, engine, baseline Figure, engineSamples, baselineSamples []float64, bar *Bar) Row {
	engine.Value, engine.Samples = median(engineSamples), engineSamples
	baseline.Value, baseline.Samples = median(baselineSamples), baselineSamples
	return Row{ID: id, Name: name, Engine: engine, Baseline: baseline, Ratio: pairedRatio(engineSamples, baselineSamples), Bar: bar}
}

// withCeiling adds the pgbench ceiling of the same shape to a throughput
// row: its median and the median of the per-repeat ratios engine / ceiling.
// No samples (pgbench unavailable) leaves the row without one, with note
// saying why.
func (r Row) withCeiling(samples []float64, note string) Row {
	if len(samples) == 0 {
		if note != "" {
			r.Note = joinNote(r.Note, "no pgbench ceiling: "+note)
		}
		return r
	}
	r.Ceiling = &Figure{Label: "pgbench, same shape", Unit: SlotsPerSecond, Value: median(samples), Samples: samples}
	r.CeilingRatio = pairedRatio(r.Engine.Samples, samples)
	return r
}

// pairedRatio is the median of a[i] / b[i], over the pairs whose b[i] is
// positive (0 for none): a figure that can be 0 or negative, such as the
// memory a series adds, has no ratio then.
func pairedRatio(a, b []float64) float64 {
	var ratios []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			ratios = append(ratios, a[i]/b[i])
		}
	}
	return median(ratios)
}

// median returns the median of xs, 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the p-th percentile of xs (0 < p <= 100) by the
// nearest-rank method, 0 for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}
