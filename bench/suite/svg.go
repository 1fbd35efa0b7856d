package suite

import (
	"bytes"
	"fmt"
	"html"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The charts are hand-written SVG (no dependency): grouped horizontal bars
// for the scenarios, each group on its own scale with its figures written
// beside the bars, and line charts for the sustained scenario.

// colors of the bars: almanac first, then the baselines in order, the
// pgbench ceiling last.
var (
	almanacColor = "#1f6fb4"
	ceilingColor = "#8c6bb1"
	otherColors  = []string{"#e6821e", "#3a9e4a", "#7f7f7f"}
)

type bar struct {
	label, text, color string
	value              float64
}

type group struct {
	title string
	bars  []bar
}

const (
	chartWidth = 960
	labelWidth = 230
	barArea    = 430
	barHeight  = 16
	barGap     = 4
	groupGap   = 14
	titleLine  = 18
)

// barChart draws groups of horizontal bars, each group scaled to its
// largest bar.
func barChart(title, caption string, groups []group) []byte {
	height := 60
	for _, g := range groups {
		height += titleLine + len(g.bars)*(barHeight+barGap) + groupGap
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height+20, chartWidth, height+20)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", esc(title))
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s</text>`+"\n", esc(caption))
	y := 60
	for _, g := range groups {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+13, esc(g.title))
		y += titleLine
		top := 0.0
		for _, br := range g.bars {
			top = math.Max(top, br.value)
		}
		for _, br := range g.bars {
			w := 0.0
			if top > 0 {
				w = br.value / top * barArea
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-8, y+12, esc(br.label))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelWidth, y, w, barHeight, br.color)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelWidth)+w+6, y+12, esc(br.text))
			y += barHeight + barGap
		}
		y += groupGap
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func esc(s string) string { return html.EscapeString(s) }

// mainRow reports whether a row belongs in the bar charts: not the curves
// of the scaling and series-scale scenarios nor memory, and measured.
func mainRow(r Row) bool {
	return r.Scenario != "scaling" && r.Scenario != "memory" && r.Scenario != "series-scale" && len(r.Engine.Samples) > 0
}

// ThroughputSVG charts the throughput scenarios: per scenario, almanac,
// each baseline (River, the same SQL from a bare loop) and the pgbench
// ceiling, medians with their ratios to almanac. Nil when the report has
// no throughput row.
func ThroughputSVG(rep Report) []byte {
	var groups []group
	for _, r := range rep.Rows {
		if !mainRow(r) || r.Engine.Unit != SlotsPerSecond {
			continue
		}
		i := slices.IndexFunc(groups, func(g group) bool { return g.title == r.Name })
		if i < 0 {
			groups = append(groups, group{title: r.Name, bars: []bar{{"almanac", formatValue(r.Engine.Value, r.Engine.Unit), almanacColor, r.Engine.Value}}})
			i = len(groups) - 1
		}
		g := &groups[i]
		if len(r.Baseline.Samples) > 0 {
			color := otherColors[2]
			switch r.Baseline.Label {
			case "River":
				color = otherColors[0]
			case "raw pgx, same SQL":
				color = otherColors[1]
			}
			text := fmt.Sprintf("%s (almanac %s)", formatValue(r.Baseline.Value, r.Baseline.Unit), formatRatio(r.Ratio))
			if r.Bar != nil {
				text += fmt.Sprintf(", bar %s: %s", r.barText(), r.Result)
			}
			g.bars = append(g.bars, bar{r.Baseline.Label, text, color, r.Baseline.Value})
		}
		if r.Ceiling != nil && !slices.ContainsFunc(g.bars, func(b bar) bool { return b.color == ceilingColor }) {
			g.bars = append(g.bars, bar{r.Ceiling.Label, fmt.Sprintf("%s (almanac %s)", formatValue(r.Ceiling.Value, r.Ceiling.Unit), formatRatio(r.CeilingRatio)), ceilingColor, r.Ceiling.Value})
		}
	}
	if len(groups) == 0 {
		return nil
	}
	// The ceiling goes last in each group.
	for i := range groups {
		slices.SortStableFunc(groups[i].bars, func(a, b bar) int {
			return boolInt(a.color == ceilingColor) - boolInt(b.color == ceilingColor)
		})
	}
	return barChart("Throughput, slots per second (higher is better)",
		fmt.Sprintf("PostgreSQL %s, medians of %d repeats, same run; each group on its own scale", rep.Server, rep.Repeats), groups)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TimesSVG charts the timed scenarios (gap detection, materialize,
// wake-up): almanac beside each baseline. Nil when there is none.
func TimesSVG(rep Report) []byte {
	var groups []group
	for _, r := range rep.Rows {
		if !mainRow(r) || (r.Engine.Unit != Milliseconds && r.Engine.Unit != Seconds) || len(r.Baseline.Samples) == 0 {
			continue
		}
		text := fmt.Sprintf("%s (almanac %s)", formatValue(r.Baseline.Value, r.Baseline.Unit), formatRatio(r.Ratio))
		if r.Bar != nil && !r.Bar.OnEngine {
			text += fmt.Sprintf(", bar %s: %s", r.barText(), r.Result)
		}
		groups = append(groups, group{title: r.Name + " vs " + r.Baseline.Label, bars: []bar{
			{"almanac", formatValue(r.Engine.Value, r.Engine.Unit), almanacColor, r.Engine.Value},
			{r.Baseline.Label, text, otherColors[0], r.Baseline.Value},
		}})
	}
	if len(groups) == 0 {
		return nil
	}
	return barChart("Time, lower is better",
		fmt.Sprintf("PostgreSQL %s, medians of %d repeats, same run; each group on its own scale", rep.Server, rep.Repeats), groups)
}

// series is one line of a line chart.
type series struct {
	label, color string
	values       []float64
}

// lineChart draws series at (x, y) in a w × h box, the y axis from 0 to the
// largest value, with an optional band. The x axis is labelled xs, or
// 1..n for none; a NaN value is a point not measured, left out of its line.
// Lines with a label have a legend inside the box.
func lineChart(b *bytes.Buffer, x, y, w, h int, title, unit string, xs []string, lines []series, band *[2]float64) {
	top := 0.0
	n := len(xs)
	for _, s := range lines {
		for _, v := range s.values {
			if !math.IsNaN(v) {
				top = math.Max(top, v)
			}
		}
		n = max(n, len(s.values))
	}
	if band != nil {
		top = math.Max(top, band[1])
	}
	top = niceCeil(top)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x, y-8, esc(title))
	px := func(i int) float64 {
		if n <= 1 {
			return float64(x) + float64(w)/2
		}
		return float64(x) + float64(i)*float64(w)/float64(n-1)
	}
	py := func(v float64) float64 { return float64(y+h) - v/top*float64(h) }
	if band != nil {
		fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="#1f6fb4" fill-opacity="0.10"/>`+"\n",
			x, py(band[1]), w, py(band[0])-py(band[1]))
	}
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ccc"/>`+"\n", x, py(top*f), x+w, py(top*f))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x-6, py(top*f)+4, esc(axisValue(top*f)+" "+unit))
	}
	for i := range n {
		label := fmt.Sprint(i + 1)
		if i < len(xs) {
			label = xs[i]
		}
		if n <= 12 || i%(n/10+1) == 0 || i == n-1 {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(i), y+h+16, esc(label))
		}
	}
	for li, s := range lines {
		var segment []string
		flush := func() {
			if len(segment) > 1 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(segment, " "))
			}
			segment = nil
		}
		for i, v := range s.values {
			if math.IsNaN(v) {
				flush()
				continue
			}
			segment = append(segment, fmt.Sprintf("%.1f,%.1f", px(i), py(v)))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", px(i), py(v), s.color)
		}
		flush()
		if s.label != "" {
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				x+w-260, y+8+li*18, s.color, x+w-242, y+18+li*18, esc(s.label))
		}
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func axisValue(v float64) string {
	switch {
	case v >= 10_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

// SustainedSVG charts the sustained scenario: throughput per period, with
// the band of ±10 % around the first period, and the slot table's and the
// history's size per period. Nil without periods.
func SustainedSVG(r SustainedReport) []byte {
	if len(r.Periods) == 0 {
		return nil
	}
	var tput, table, heap, history []float64
	for _, p := range r.Periods {
		tput = append(tput, p.SlotsPerSecond)
		table = append(table, mib(p.SlotBytes))
		heap = append(heap, mib(p.HeapBytes))
		history = append(history, mib(p.HistoryBytes))
	}
	var b bytes.Buffer
	const width, height = 960, 620
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("Sustained load: %d batched locked workers, re-opens feeding work, autovacuum %s", r.Workers, r.Autovacuum)))
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s</text>`+"\n",
		esc(fmt.Sprintf("PostgreSQL %s, a cluster of its own with %s; x: period of %s after a warm-up of %s",
			r.Server, r.settings(), fmtSeconds(r.PeriodS), fmtSeconds(r.WarmupS))))
	fmt.Fprintf(&b, `<text x="10" y="56" fill="#555">%s</text>`+"\n",
		esc(fmt.Sprintf("%d handler runs, exactly once: %v; every period within 10 %% of the first: %v (largest deviation %.1f %%)",
			r.Runs, r.ExactlyOnce, r.Stable, 100*r.MaxDeviation)))
	first := tput[0]
	lineChart(&b, 90, 80, 840, 200, "Throughput per period (band: first period ±10 %)", "slots/s", nil,
		[]series{{"slots/s", almanacColor, tput}}, &[2]float64{0.9 * first, 1.1 * first})
	lineChart(&b, 90, 360, 840, 200, "Size at the end of each period", "MiB", nil,
		[]series{{"slot table + indexes", almanacColor, table}, {"slot table heap", otherColors[1], heap}, {"history (slot_event)", otherColors[0], history}}, nil)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func fmtSeconds(s float64) string {
	if s >= 60 && math.Mod(s, 60) == 0 {
		return fmt.Sprintf("%.0f min", s/60)
	}
	return fmt.Sprintf("%.0f s", s)
}

// seriesScaleCharts are the series-scale charts: a row kind and its title.
var seriesScaleCharts = []struct{ kind, title string }{
	{"tx", "Transactions/s at rest"},
	{"cores", "Cores at rest, PostgreSQL + process"},
	{"rss", "RSS at rest"},
	{"start", "Start-up: process start to Start returned"},
	{"p99", "Slots due at one boundary: due to handler start, p99"},
}

// SeriesScaleSVG charts the series-scale scenario against the number of
// series: cost at rest, RSS, start-up and boundary latency, almanac beside
// River, each chart titled with its target. A side that was not measured
// at a count (it did not start in time) has no point there. Nil when the
// report has no series-scale row.
func SeriesScaleSVG(rep Report) []byte {
	var counts []string
	values := map[string]map[string][2]float64{} // kind → count → [almanac, River]
	units := map[string]string{}
	for _, r := range rep.Rows {
		if r.Scenario != "series-scale" || r.Result == Skipped {
			continue
		}
		kind, c, ok := strings.Cut(strings.TrimPrefix(r.ID, "series-scale-"), "-")
		if !ok {
			continue
		}
		if !slices.Contains(counts, c) {
			counts = append(counts, c)
		}
		if values[kind] == nil {
			values[kind] = map[string][2]float64{}
		}
		v := [2]float64{math.NaN(), math.NaN()}
		for i, f := range []Figure{r.Engine, r.Baseline} {
			if len(f.Samples) > 0 {
				v[i] = f.Value
			}
		}
		values[kind][c], units[kind] = v, string(r.Engine.Unit)
	}
	if len(counts) == 0 {
		return nil
	}
	var b bytes.Buffer
	const width, height = 960, 850
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n",
		esc("Idle series: one series and job per tenant in one process, almanac vs River (lower is better)"))
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s</text>`+"\n",
		esc(fmt.Sprintf("PostgreSQL %s, a cluster of the bench's own; x: series (River: periodic jobs); medians over %d boundaries", rep.Server, rep.Repeats)))
	fmt.Fprintf(&b, `<text x="10" y="56" fill="#555">%s</text>`+"\n",
		esc("no point: not started in time; a latency equal to the wait (60 s, --quick 5 s): too few slots had started by then"))
	colors := [2]string{almanacColor, otherColors[0]}
	for side, color := range colors {
		fmt.Fprintf(&b, `<rect x="%d" y="66" width="12" height="12" fill="%s"/><text x="%d" y="76">%s</text>`+"\n",
			10+side*100, color, 28+side*100, esc(scaleSides[side]))
	}
	for i, ch := range seriesScaleCharts {
		var lines [2]series
		for side := range lines {
			lines[side].color = colors[side]
			for _, c := range counts {
				v, ok := values[ch.kind][c]
				if !ok {
					v = [2]float64{math.NaN(), math.NaN()}
				}
				lines[side].values = append(lines[side].values, v[side])
			}
		}
		x, y := 90+(i%2)*470, 116+(i/2)*250
		lineChart(&b, x, y, 380, 170, ch.title, units[ch.kind], counts, lines[:], nil)
		if targets := scaleTargets(ch.kind, units[ch.kind]); targets != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", x, y+170+34, esc("target: "+targets))
		}
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// scaleTargets says a chart's targets: "≤ 30 tx/s at 10k".
func scaleTargets(kind, unit string) string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(scaleBars[kind])) {
		out = append(out, fmt.Sprintf("≤ %g %s at %s", scaleBars[kind][n], unit, count(n)))
	}
	return strings.Join(out, ", ")
}
