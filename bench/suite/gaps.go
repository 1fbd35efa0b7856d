package suite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/slot"
)

// leadGaps is the main baseline of gap detection: the query a DBA would
// write, one pass over the primary key in order with lead() finding where
// the next slot does not start at this one's end, plus the edges of the
// range. It returns each gap's bounds.
const leadGaps = `WITH s AS (
		SELECT slot_start, slot_end, lead(slot_start, 1, $4::timestamptz) OVER (ORDER BY slot_start) AS next_start
		FROM {{schema}}.slot WHERE name = $1 AND "interval" = $2 AND slot_start >= $3 AND slot_start < $4)
	SELECT slot_end, next_start FROM s WHERE next_start > slot_end
	UNION ALL
	SELECT $3::timestamptz, coalesce(min(slot_start), $4::timestamptz) FROM s HAVING coalesce(min(slot_start), $4::timestamptz) > $3::timestamptz`

// naiveGaps is the second, labelled baseline: every grid start from a
// timestamptz generate_series, anti-joined with the table (PostgreSQL runs
// it as one index probe per slot).
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
		start := i*region + 1 + rng.IntN(max(1, region-length-1))
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
	return ms(elapsed), g.check("Gaps", gaps, missing)
}

func (g gapSearch) check(what string, gaps int, missing int64) error {
	if gaps != g.gaps || missing != g.missing {
		return fmt.Errorf("%s found %d gaps of %d slots; expected %d of %d", what, gaps, missing, g.gaps, g.missing)
	}
	return nil
}

// lead times the lead() window query over the range, in milliseconds.
func (g gapSearch) lead(ctx context.Context) (float64, error) {
	start := time.Now()
	rows, err := g.s.e.admin.Query(ctx, render(leadGaps, g.s.name), g.grid.Name(), g.grid.Interval().String(), at(0), at(g.n))
	if err != nil {
		return 0, err
	}
	var missing int64
	gaps := 0
	for rows.Next() {
		var from, to time.Time
		if err := rows.Scan(&from, &to); err != nil {
			rows.Close()
			return 0, err
		}
		gaps++
		missing += int64(to.Sub(from) / time.Minute)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	return ms(elapsed), g.check("the lead() query", gaps, missing)
}

// naive times the anti-join over the range, in milliseconds.
func (g gapSearch) naive(ctx context.Context) (float64, error) {
	start := time.Now()
	rows, err := g.s.e.admin.Query(ctx, render(naiveGaps, g.s.name), g.grid.Name(), g.grid.Interval().String(), at(0), at(g.n))
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

var (
	leadFigure  = Figure{Label: "lead() window", Unit: Milliseconds}
	naiveFigure = Figure{Label: "NOT EXISTS anti-join", Unit: Milliseconds}
	gapsFigure  = Figure{Label: "almanac", Unit: Milliseconds}
)

// measure interleaves the search with the lead() query and, if naive is
// set, the anti-join; it returns the row against lead() and, if naive,
// the one against the anti-join (id + "-naive").
func (g gapSearch) measure(ctx context.Context, id, name string, bar *Bar, naive bool) ([]Row, error) {
	var anti measurement
	if naive {
		anti = g.naive
	}
	sides, err := g.s.e.interleave(ctx, g.engine, g.lead, anti)
	if err != nil {
		return nil, err
	}
	rows := []Row{newRow(id, name, gapsFigure, leadFigure, sides[0], sides[1], bar)}
	if naive {
		rows = append(rows, newRow(id+"-naive", name, gapsFigure, naiveFigure, sides[0], sides[2], nil))
	}
	return rows, nil
}

// runGaps: gap detection over a complete range and over one with holes,
// against the lead() window query on the same data, and the naive
// anti-join as a second, labelled baseline.
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
	bar := &Bar{Value: 0.5}
	complete, err := g.measure(ctx, "gaps-complete", fmt.Sprintf("gaps over %s slots, complete", count(n)), bar, true)
	if err != nil {
		return nil, err
	}
	if err := g.punch(ctx, e.size.holes); err != nil {
		return nil, err
	}
	holes, err := g.measure(ctx, "gaps-holes", fmt.Sprintf("gaps over %s slots, %d holes", count(n), e.size.holes), bar, true)
	if err != nil {
		return nil, err
	}
	return append(complete, holes...), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
