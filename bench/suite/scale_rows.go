package suite

import (
	"fmt"
	"strings"
)

// scaleBars are the series-scale targets, by row kind and count of
// tenants (issue 33's, on the 2-core machine the bench is run on).
var scaleBars = map[string]map[int]float64{
	"start": {10_000: 3},
	"tx":    {10_000: 30, 100_000: 100},
	"cores": {10_000: 0.10},
	"rss":   {10_000: 300},
	"mem":   {10_000: 4},
	"p99":   {10_000: 10},
}

// scaleRows are the rows of one count of tenants, almanac's figures next
// to River's (runs and refs hold almanac's process first; nil for a side
// not run).
func scaleRows(n int, sz scaleSizes, runs, refs [2]*scaleRun) []Row {
	c := count(n)
	started := func(r *scaleRun) bool { return r != nil && r.total > 0 }
	row := func(kind, name string, unit Unit, samples func(*scaleRun) []float64) Row {
		var s [2][]float64
		for i, r := range runs {
			if r != nil {
				s[i] = samples(r)
			}
		}
		var bar *Bar
		if v, ok := scaleBars[kind][n]; ok {
			bar = &Bar{OnEngine: true, Value: v}
		}
		r := newRow("series-scale-"+kind+"-"+c, name, Figure{Label: "almanac", Unit: unit}, Figure{Label: "River", Unit: unit}, s[0], s[1], bar)
		for i, run := range runs {
			if run != nil && len(s[i]) == 0 && kind != "start" {
				r.Note = joinNote(r.Note, fmt.Sprintf("%s: not measured (see series-scale-start-%s)", scaleSides[i], c))
			}
		}
		return r
	}
	one := func(f func(*scaleRun) float64) func(*scaleRun) []float64 {
		return func(r *scaleRun) []float64 {
			if !started(r) {
				return nil
			}
			return []float64{f(r)}
		}
	}
	perSeries := func(i int) func(*scaleRun) []float64 {
		return func(r *scaleRun) []float64 {
			ref := refs[i]
			if ref == nil || len(ref.rssGC) == 0 {
				return nil
			}
			var out []float64
			for _, v := range r.rssGC {
				out = append(out, (v-ref.rssGC[0])*1024/float64(n))
			}
			return out
		}
	}

	rows := []Row{
		row("start", fmt.Sprintf("start-up, %s series: process start to Start returned", c), Seconds, one(func(r *scaleRun) float64 { return r.total })),
		row("register", fmt.Sprintf("start-up, %s series: declaring the series and jobs", c), Seconds, one(func(r *scaleRun) float64 { return r.register })),
		row("startcall", fmt.Sprintf("start-up, %s series: Start", c), Seconds, one(func(r *scaleRun) float64 { return r.start })),
		row("tx", fmt.Sprintf("at rest, %s series: transactions/s", c), TransactionsPerSecond, func(r *scaleRun) []float64 { return r.tx }),
		row("cores", fmt.Sprintf("at rest, %s series: cores, PostgreSQL + process", c), Cores, func(r *scaleRun) []float64 { return r.cores }),
		row("rss", fmt.Sprintf("at rest, %s series: RSS", c), MiB, func(r *scaleRun) []float64 { return r.rss }),
		{}, // memory per series, below: each side against its own reference
		row("p50", fmt.Sprintf("%s slots due at one boundary: due to handler start, p50", c), Seconds, func(r *scaleRun) []float64 { return r.p50 }),
		row("p99", fmt.Sprintf("%s slots due at one boundary: due to handler start, p99", c), Seconds, func(r *scaleRun) []float64 { return r.p99 }),
	}
	var mem [2][]float64
	for i, r := range runs {
		if r != nil {
			mem[i] = perSeries(i)(r)
		}
	}
	var memBar *Bar
	if v, ok := scaleBars["mem"][n]; ok {
		memBar = &Bar{OnEngine: true, Value: v}
	}
	rows[6] = newRow("series-scale-mem-"+c, fmt.Sprintf("memory per series, %s series vs %d, after a GC", c, sz.reference),
		Figure{Label: "almanac", Unit: KiB}, Figure{Label: "River", Unit: KiB}, mem[0], mem[1], memBar)

	var startNotes, coreNotes, restNotes, boundaryNotes, memNotes []string
	for i, r := range runs {
		if r == nil {
			continue
		}
		side := scaleSides[i]
		if started(r) {
			startNotes = append(startNotes, fmt.Sprintf("%s: connect %.2f s, declare %.2f s, Start %.2f s", side, r.connect, r.register, r.start))
		}
		if r.failed != "" {
			startNotes = append(startNotes, side+" "+r.failed)
		}
		for _, msg := range r.notes {
			startNotes = append(startNotes, side+": "+msg)
		}
		if len(r.cores) > 0 {
			coreNotes = append(coreNotes, fmt.Sprintf("%s: process %.3f + PostgreSQL %.3f", side, median(r.procCores), median(r.serverCores)))
		}
		if r.unsettled > 0 {
			restNotes = append(restNotes, fmt.Sprintf("%s: %s of the slots due at Start had not run when the first window came", side, thousands(int(r.unsettled))))
		}
		if r.windowRuns > 0 {
			restNotes = append(restNotes, fmt.Sprintf("%s: %s handler runs inside the rest windows (a boundary's work not done yet)", side, thousands(int(r.windowRuns))))
		}
		if r.due > 0 {
			boundaryNotes = append(boundaryNotes, fmt.Sprintf("%s: %s of %s slots started within 10 s, %s within %.0f s",
				side, thousands(r.within10), thousands(r.due), thousands(r.withinLimit), sz.boundaryLimit().Seconds()))
		}
		if r.capped {
			boundaryNotes = append(boundaryNotes, fmt.Sprintf("%s: a percentile shown as %.0f s is at least that: too few slots started within it", side, sz.boundaryLimit().Seconds()))
		}
		if ref := refs[i]; ref != nil && len(ref.rssGC) == 0 {
			memNotes = append(memNotes, fmt.Sprintf("%s: the %d-series reference %s", side, ref.tenants, ref.failed))
		}
	}
	note := func(k int, notes []string) { rows[k].Note = joinNote(strings.Join(notes, "; "), rows[k].Note) }
	note(0, startNotes)
	note(3, restNotes)
	note(4, coreNotes)
	note(6, memNotes)
	note(8, boundaryNotes)
	return rows
}
