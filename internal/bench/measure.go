package bench

import (
	"context"
	"math"
	"slices"
)

// measurement measures one side once, on a table it prepares itself, and
// returns the figure.
type measurement func(ctx context.Context) (float64, error)

// pair holds the samples of an engine and its baseline, one per repeat, in
// the order they were taken.
type pair struct {
	engine, baseline []float64
}

// interleave measures engine and baseline alternately, e.repeats times
// each. The side that goes first alternates between repeats, so neither
// always gets the warmer cache or the quieter moment.
func (e *env) interleave(ctx context.Context, engine, baseline measurement) (pair, error) {
	var p pair
	for i := range e.repeats {
		steps := []struct {
			m    measurement
			into *[]float64
		}{{engine, &p.engine}, {baseline, &p.baseline}}
		if i%2 == 1 {
			slices.Reverse(steps)
		}
		for _, s := range steps {
			v, err := s.m(ctx)
			if err != nil {
				return pair{}, err
			}
			*s.into = append(*s.into, v)
			e.advance()
		}
	}
	return p, nil
}

// row is the row of p: medians of both sides and the median of the
// per-repeat ratios, with its bar (nil for none); Run judges it.
func (p pair) row(id, name string, engine, baseline Figure, bar *Bar) Row {
	var ratios []float64
	for i := range min(len(p.engine), len(p.baseline)) {
		ratios = append(ratios, p.engine[i]/p.baseline[i])
	}
	engine.Value, engine.Samples = median(p.engine), p.engine
	baseline.Value, baseline.Samples = median(p.baseline), p.baseline
	return Row{ID: id, Name: name, Engine: engine, Baseline: baseline, Ratio: median(ratios), Bar: bar}
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
