package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// naiveGaps is the baseline of gap detection: every grid start from a
// timestamptz generate_series, anti-joined with the table.
const naiveGaps = `SELECT g FROM generate_series($3::timestamptz, $4::timestamptz - interval '1 minute', interval '1 minute') AS g
	WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.slot s WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = g)`

// gapSearch is a gap search over the first n slots of a series, which
// should find gaps gaps of missing slots in all.
type gapSearch struct {
	s       *schema
	grid    slot.Series
	cov     *coverage.Client
	n       int
	gaps    int
	missing int64
}

// newGapSearch registers a series and loads its first n slots as
// COMPLETE, less holes runs of them, and vacuums.
func (s *schema) newGapSearch(ctx context.Context, name string, n, holes int) (gapSearch, error) {
	grid, err := s.series(ctx, name)
	if err != nil {
		return gapSearch{}, err
	}
	g := gapSearch{s: s, grid: grid, n: n}
	if g.cov, err = coverage.New(ctx, s.e.admin, grid, coverage.Options{Schema: s.name}); err != nil {
		return gapSearch{}, err
	}
	if err := s.load(ctx, grid, n, "COMPLETE"); err != nil {
		return gapSearch{}, err
	}
	if err := g.punch(ctx, holes); err != nil {
		return gapSearch{}, err
	}
	return g, nil
}

// punch deletes holes runs of 1 to 20 slots, one in each of holes equal
// regions of the range, never touching each other, and vacuums.
func (g *gapSearch) punch(ctx context.Context, holes int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	region := g.n / max(holes, 1)
	for i := range holes {
		length := 1 + rng.IntN(max(1, min(20, region/2)))
		start := i*region + rng.IntN(max(1, region-length))
		deleted, err := g.s.exec(ctx, `DELETE FROM {{schema}}.slot WHERE name = $1 AND "interval" = $2 AND slot_start >= $3 AND slot_start < $4`,
			g.grid.Name(), g.grid.Interval().String(), at(start), at(start+length))
		if err != nil {
			return fmt.Errorf("punch holes: %w", err)
		}
		g.missing += deleted
		g.gaps++
	}
	return g.s.vacuum(ctx)
}

// engine times coverage's Gaps over the range, in milliseconds.
func (g gapSearch) engine(ctx context.Context) (float64, error) {
	start := time.Now()
	var missing int64
	gaps := 0
	for gap, err := range g.cov.Gaps(ctx, at(0), at(g.n)) {
		if err != nil {
			return 0, err
		}
		missing += gap.Slots
		gaps++
	}
	elapsed := time.Since(start)
	if gaps != g.gaps || missing != g.missing {
		return 0, fmt.Errorf("Gaps found %d gaps of %d slots; expected %d of %d", gaps, missing, g.gaps, g.missing)
	}
	return ms(elapsed), nil
}

// naive times the anti-join over the range, in milliseconds.
func (g gapSearch) naive(ctx context.Context) (float64, error) {
	start := time.Now()
	rows, err := g.s.e.admin.Query(ctx, sqlschema.Render(naiveGaps, g.s.name), g.grid.Name(), g.grid.Interval().String(), at(0), at(g.n))
	if err != nil {
		return 0, err
	}
	var missing int64
	for rows.Next() {
		missing++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if missing != g.missing {
		return 0, fmt.Errorf("the anti-join found %d missing slots; expected %d", missing, g.missing)
	}
	return ms(elapsed), nil
}

// measure interleaves the search with the naive anti-join.
func (g gapSearch) measure(ctx context.Context, id, name string, bar *Bar) (Row, error) {
	p, err := g.s.e.interleave(ctx, g.engine, g.naive)
	if err != nil {
		return Row{}, err
	}
	return p.row(id, name, Figure{Label: "almanac", Unit: Milliseconds},
		Figure{Label: "NOT EXISTS anti-join", Unit: Milliseconds}, bar), nil
}

// runGaps: gap detection over a complete range and over one with holes,
// against the naive anti-join on the same data.
func runGaps(ctx context.Context, e *env) ([]Row, error) {
	s, err := e.newSchema(ctx, "gaps")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	n := e.size.gaps
	g, err := s.newGapSearch(ctx, "bench", n, 0)
	if err != nil {
		return nil, err
	}
	bar := &Bar{Value: 0.10}
	complete, err := g.measure(ctx, "gaps-complete", fmt.Sprintf("gaps over %s slots, complete", count(n)), bar)
	if err != nil {
		return nil, err
	}
	if err := g.punch(ctx, e.size.holes); err != nil {
		return nil, err
	}
	holes, err := g.measure(ctx, "gaps-holes", fmt.Sprintf("gaps over %s slots, %d holes", count(n), e.size.holes), bar)
	if err != nil {
		return nil, err
	}
	return []Row{complete, holes}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
