package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a run.
type Report struct {
	// Server is PostgreSQL's version string.
	Server  string `json:"server"`
	Quick   bool   `json:"quick"`
	Repeats int    `json:"repeats"`
	Workers int    `json:"workers"`
	Rows    []Row  `json:"rows"`
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

// Row is one figure of the engine next to its baseline.
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
	Ratio  float64 `json:"ratio"`
	Bar    *Bar    `json:"bar,omitempty"`
	Result Result  `json:"result"`
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

// Unit is the unit of a figure.
type Unit string

// Units of figures.
const (
	SlotsPerSecond Unit = "slots/s"
	Seconds        Unit = "s"
	Milliseconds   Unit = "ms"
	MiB            Unit = "MiB"
)

// Bar is what DESIGN.md requires of a row: its ratio, or for absolute bars
// the engine's figure, compared with Value.
type Bar struct {
	// OnEngine applies the bar to the engine's figure instead of the ratio.
	OnEngine bool `json:"on_engine,omitempty"`
	// AtLeast is set for "≥ Value", clear for "≤ Value".
	AtLeast bool    `json:"at_least"`
	Value   float64 `json:"value"`
	// Stretch is a further goal, reported in the row's note; 0 for none.
	Stretch float64 `json:"stretch,omitempty"`
}

func (b Bar) met(v float64) bool {
	if b.AtLeast {
		return v >= b.Value
	}
	return v <= b.Value
}

// judge sets the result of a measured row from its bar.
func (r *Row) judge() {
	if r.Bar == nil {
		r.Result = Info
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
	if r.Bar.Stretch != 0 {
		stretch := Bar{AtLeast: r.Bar.AtLeast, Value: r.Bar.Stretch}
		verdict := "not met"
		if stretch.met(v) {
			verdict = "met"
		}
		r.Note = strings.TrimSpace(r.Note + fmt.Sprintf(" stretch %s: %s", r.formatBarValue(r.Bar.Stretch), verdict))
	}
}

func (r Row) formatBarValue(v float64) string {
	if r.Bar.OnEngine {
		return formatValue(v, r.Engine.Unit)
	}
	return formatRatio(v)
}

// WriteTable prints the report as an aligned table, one row per figure,
// then the notes of the rows that have one.
func (rep Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tengine\tbaseline\tratio\tbar\tresult")
	var notes []string
	for _, r := range rep.Rows {
		bar := "—"
		if r.Bar != nil {
			op := "≤"
			if r.Bar.AtLeast {
				op = "≥"
			}
			bar = op + " " + r.formatBarValue(r.Bar.Value)
		}
		if r.Result == Skipped {
			engine := "—"
			if len(r.Engine.Samples) > 0 {
				engine = formatValue(r.Engine.Value, r.Engine.Unit)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s —\t—\t%s\t%s\n", r.Name, engine, r.Baseline.Label, bar, r.Result)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\n", r.Name, formatValue(r.Engine.Value, r.Engine.Unit),
				r.Baseline.Label, formatValue(r.Baseline.Value, r.Baseline.Unit), formatRatio(r.Ratio), bar, r.Result)
		}
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

func formatRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	if v < 0.1 {
		return fmt.Sprintf("%.3f×", v)
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
	case Milliseconds:
		if v < 10 {
			return fmt.Sprintf("%.2f %s", v, u)
		}
		return fmt.Sprintf("%.0f %s", v, u)
	default:
		return fmt.Sprintf("%.1f %s", v, u)
	}
}
