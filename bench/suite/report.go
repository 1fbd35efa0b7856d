package suite

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a run: the rows measured, in order. An
// interrupted run's report holds the rows finished before it stopped.
type Report struct {
	// Server is PostgreSQL's version string.
	Server  string `json:"server"`
	Quick   bool   `json:"quick"`
	Repeats int    `json:"repeats"`
	Workers int    `json:"workers"`
	Rows    []Row  `json:"rows"`
	// Interrupted is set when the run stopped before its last scenario.
	Interrupted bool `json:"interrupted,omitempty"`
	// Notes say what applies to the whole run.
	Notes []string `json:"notes,omitempty"`
}

// Result says how a row compares with its bar.
type Result string

// Results of a row.
const (
	Pass    Result = "pass"    // the bar is met
	Miss    Result = "miss"    // the bar is not met
	Info    Result = "info"    // the row has no bar, or the run was quick
	Skipped Result = "skipped" // the row could not be measured here; Note says why
)

// Row is one figure of the engine next to its baseline, and for
// throughput rows the pgbench ceiling of the same shape.
type Row struct {
	// ID names the row, stable between runs: "locked", "gaps-holes",
	// "scaling-lease-8".
	ID string `json:"id"`
	// Scenario is the scenario that measured it (see Scenarios).
	Scenario string `json:"scenario"`
	// Name describes what was measured, sizes included.
	Name     string `json:"name"`
	Engine   Figure `json:"engine"`
	Baseline Figure `json:"baseline"`
	// Ratio is the median of the per-repeat ratios engine / baseline.
	Ratio float64 `json:"ratio"`
	// Ceiling is pgbench doing the same claim and completion on a bare
	// table in the same run, nil for rows without one.
	Ceiling *Figure `json:"ceiling,omitempty"`
	// CeilingRatio is the median of the per-repeat ratios engine / ceiling.
	CeilingRatio float64 `json:"ceiling_ratio,omitempty"`
	Bar          *Bar    `json:"bar,omitempty"`
	Result       Result  `json:"result"`
	// Note explains a skipped row, or adds what the table cannot say.
	Note string `json:"note,omitempty"`
}

// Figure is a median over the repeats, with every sample.
type Figure struct {
	// Label names what was measured: "almanac", "raw pgx, same SQL", "River".
	Label   string    `json:"label"`
	Value   float64   `json:"value"`
	Unit    Unit      `json:"unit"`
	Samples []float64 `json:"samples"`
}

// Spread is (max − min) / median of the samples, 0 for fewer than two.
func (f Figure) Spread() float64 {
	if len(f.Samples) < 2 || f.Value == 0 {
		return 0
	}
	return (slices.Max(f.Samples) - slices.Min(f.Samples)) / f.Value
}

// Unit is the unit of a figure.
type Unit string

// Units of figures.
const (
	SlotsPerSecond        Unit = "slots/s"
	Seconds               Unit = "s"
	Milliseconds          Unit = "ms"
	MiB                   Unit = "MiB"
	KiB                   Unit = "KiB"
	TransactionsPerSecond Unit = "tx/s"
	// Cores is CPU time per second of wall time.
	Cores Unit = "cores"
)

// Bar is what a row must meet: its ratio, or for absolute bars the
// engine's figure, compared with Value.
type Bar struct {
	// OnEngine applies the bar to the engine's figure instead of the ratio.
	OnEngine bool `json:"on_engine,omitempty"`
	// AtLeast is set for "≥ Value", clear for "≤ Value".
	AtLeast bool    `json:"at_least"`
	Value   float64 `json:"value"`
}

func (b Bar) met(v float64) bool {
	if b.AtLeast {
		return v >= b.Value
	}
	return v <= b.Value
}

// judge sets the result of a measured row from its bar. A row whose engine
// side could not be measured (it did not start within its limits) misses
// a bar on the engine's figure.
func (r *Row) judge() {
	if r.Bar == nil {
		r.Result = Info
		return
	}
	if r.Bar.OnEngine && len(r.Engine.Samples) == 0 {
		r.Result = Miss
		return
	}
	v := r.Ratio
	if r.Bar.OnEngine {
		v = r.Engine.Value
	}
	r.Result = Miss
	if r.Bar.met(v) {
		r.Result = Pass
	}
}

func (r Row) barText() string {
	if r.Bar == nil {
		return "—"
	}
	op := "≤"
	if r.Bar.AtLeast {
		op = "≥"
	}
	if r.Bar.OnEngine {
		return op + " " + formatValue(r.Bar.Value, r.Engine.Unit)
	}
	return op + " " + formatRatio(r.Bar.Value)
}

// cells are the row's columns as WriteTable and Line print them.
func (r Row) cells() []string {
	engine, spread, baseline, ratio := "—", "—", r.Baseline.Label+" —", "—"
	if len(r.Engine.Samples) > 0 {
		engine = formatValue(r.Engine.Value, r.Engine.Unit)
		if s := r.Engine.Spread(); s > 0 {
			spread = fmt.Sprintf("±%.0f%%", 50*s)
		}
	}
	if len(r.Baseline.Samples) > 0 {
		baseline = r.Baseline.Label + " " + formatValue(r.Baseline.Value, r.Baseline.Unit)
		if len(r.Engine.Samples) > 0 {
			ratio = formatRatio(r.Ratio)
		}
	}
	ceiling := "—"
	if r.Ceiling != nil {
		ceiling = formatValue(r.Ceiling.Value, r.Ceiling.Unit) + " (" + formatRatio(r.CeilingRatio) + ")"
	}
	return []string{r.Name, engine, spread, baseline, ratio, ceiling, r.barText(), string(r.Result)}
}

// header names the columns of cells.
var header = []string{"scenario", "almanac", "spread", "baseline", "ratio", "pgbench ceiling (almanac/it)", "bar", "result"}

// lineWidths are the column widths of Line, wide enough for the full run's
// names and figures. TestQuick checks that the quick run's rows line up
// with the header; the full run's names and baselines are up to two
// characters longer (100k slots, 8 processes), which the widths leave
// room for (the longest full-run name is 70 characters, its baseline 39).
var lineWidths = []int{74, 15, 8, 42, 8, 30, 10, 0}

// HeaderLine is the header of the rows Line prints, for streaming.
func HeaderLine() string { return pad(header) }

// Line prints the row on one line, aligned with HeaderLine, for printing
// rows as they finish.
func (r Row) Line() string { return pad(r.cells()) }

func pad(cells []string) string {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if w := lineWidths[i]; w > 0 {
			b.WriteString(strings.Repeat(" ", max(1, w-len([]rune(c)))))
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// WriteTable prints the report as an aligned table, one row per figure,
// then the notes of the rows that have one and the run's notes. Spread is
// half the range of the engine's samples around the median.
func (rep Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	var notes []string
	for _, r := range rep.Rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
		if r.Note != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", r.ID, r.Note))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	notes = append(notes, rep.Notes...)
	if len(notes) > 0 {
		_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
		return err
	}
	return nil
}

func joinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

func formatRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	switch {
	case v < 0.1:
		return fmt.Sprintf("%.3f×", v)
	case v >= 100:
		return fmt.Sprintf("%.0f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

func formatValue(v float64, u Unit) string {
	switch u {
	case SlotsPerSecond:
		if v >= 10_000 {
			return fmt.Sprintf("%.1fk %s", v/1000, u)
		}
		return fmt.Sprintf("%.0f %s", v, u)
	case Seconds:
		return fmt.Sprintf("%.2f %s", v, u)
	case Milliseconds, TransactionsPerSecond:
		if v < 10 {
			return fmt.Sprintf("%.2f %s", v, u)
		}
		return fmt.Sprintf("%.0f %s", v, u)
	case Cores:
		return fmt.Sprintf("%.3f %s", v, u)
	default:
		return fmt.Sprintf("%.1f %s", v, u)
	}
}
