// Command almanac-bench is almanac's benchmark suite: every figure of the
// engine next to a baseline measured in the same run, on the same
// database (the same SQL from a bare pgx loop, River linked in as a
// library, a lead() window query, a raw INSERT … SELECT, pgbench doing the
// same claim and completion on a bare table), and a sustained-load
// scenario on a PostgreSQL cluster it starts itself. It is a module of its
// own, so that neither almanac's binary nor its users' builds carry River
// or the bench.
//
// Run it from this directory:
//
//	cd bench
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run . [flags]
//	go run . --sustained 30m
//
// Flags:
//
//	--quick             a small version of every scenario, in seconds (no bar judged)
//	--json              one JSON object per line, each row as it finishes
//	--repeats N         measurements of each side of a row (default 3); medians are quoted
//	--workers N         concurrency of the throughput scenarios (default 8, at most 32)
//	--scenarios a,b     the scenarios to run (default all but materialize-10m and series-scale, which run only
//	                    when named, series-scale also with --quick; see --help)
//	--almanac PATH      almanac's command line, for the memory scenario (default: almanac on PATH)
//	--pgbench PATH      pgbench, for the ceilings (default: on PATH or in /usr/lib/postgresql/*/bin)
//	--svg DIR           write the charts (throughput.svg, times.svg, series-scale.svg, sustained.svg) into DIR
//	--sustained D       run only the sustained scenario, for D (e.g. 30m), on a cluster of its own
//	--period P          the sustained scenario's reporting period (default 1m)
//	--server-setting name=value
//	                    a setting of the sustained scenario's cluster (repeatable; default PostgreSQL's defaults)
//
// Rows print as they finish (with a progress line on a terminal's stderr),
// then the whole table. Interrupted (SIGINT, SIGTERM), it stops the running
// measurement, prints and charts what it measured, and exits 130. Exit 0
// when the suite ran, whether or not every bar was met (a missed bar is a
// row that says miss); 1 when a scenario failed (a slot or job that ran
// twice or never fails its scenario loudly); 2 for bad flags; 3 when the
// database cannot be reached. The database comes from DATABASE_URL, else
// from the libpq PG* variables.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/bench/suite"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnavailable = 3
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if suite.IsChild() {
		// A scenario started this binary again to measure a process of its
		// own (series-scale).
		code := suite.RunChild(ctx, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// flags are the command line's options.
type flags struct {
	quick, json, hold bool
	repeats, workers  int
	scenarios         string
	almanac, pgbench  string
	svg               string
	sustained, period time.Duration
	settings          repeated
	// serverSettings are settings, parsed.
	serverSettings []suite.ServerSetting
}

// repeated collects the values of a flag given more than once. They are
// checked after parsing, so that a bad one is reported on one line, not
// with the usage.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, " ") }

func (r *repeated) Set(v string) error {
	*r = append(*r, v)
	return nil
}

func parse(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("almanac-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&f.quick, "quick", false, "run a small version of every scenario, in seconds (no bar is judged)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per line, each row as it finishes")
	fs.IntVar(&f.repeats, "repeats", suite.DefaultRepeats, "measurements of each side of a row; medians are quoted")
	fs.IntVar(&f.workers, "workers", suite.DefaultWorkers, fmt.Sprintf("workers of the throughput scenarios, 1 to %d", suite.MaxWorkers))
	fs.StringVar(&f.scenarios, "scenarios", "", "comma-separated scenarios to run (default all but the opt-in ones: materialize-10m, and series-scale but with --quick)")
	fs.BoolVar(&f.hold, "hold-snapshot", false, "keep a transaction with its snapshot open for the whole run, as a long job or backup would")
	fs.StringVar(&f.almanac, "almanac", "", "almanac's command line, for the memory scenario (default: almanac on PATH)")
	fs.StringVar(&f.pgbench, "pgbench", "", "pgbench, for the ceilings (default: on PATH or in /usr/lib/postgresql/*/bin)")
	fs.StringVar(&f.svg, "svg", "", "directory to write the charts into (throughput.svg, times.svg, series-scale.svg, sustained.svg)")
	fs.DurationVar(&f.sustained, "sustained", 0, "run only the sustained scenario, for this long (e.g. 30m), on a cluster of its own")
	fs.DurationVar(&f.period, "period", time.Minute, "reporting period of the sustained scenario")
	fs.Var(&f.settings, "server-setting", "`name=value` for the sustained scenario's cluster, such as max_wal_size=8GB (repeatable; default PostgreSQL's defaults)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: almanac-bench [flags]   (run from the bench directory: go run . [flags])")
		fmt.Fprintln(stderr, "\nScenarios:")
		for _, s := range suite.Scenarios() {
			fmt.Fprintf(stderr, "  %-16s %s\n", s.ID, s.About)
		}
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case fs.NArg() > 0:
		return f, fmt.Errorf("unexpected argument %q; expected flags only", fs.Arg(0))
	case f.repeats < 1 || f.repeats > 100:
		return f, fmt.Errorf("--repeats %d: expected 1 to 100", f.repeats)
	case f.workers < 1 || f.workers > suite.MaxWorkers:
		return f, fmt.Errorf("--workers %d: expected 1 to %d", f.workers, suite.MaxWorkers)
	case f.sustained < 0:
		return f, fmt.Errorf("--sustained %s: expected a positive duration such as 30m", f.sustained)
	case f.period <= 0 || f.period > 24*time.Hour:
		return f, fmt.Errorf("--period %s: expected a positive duration such as 1m", f.period)
	case len(f.settings) > 0 && f.sustained == 0:
		return f, errors.New("--server-setting: applies to the cluster of --sustained only; expected --sustained too")
	case f.hold && f.sustained > 0:
		return f, errors.New("--hold-snapshot: applies to the database of DATABASE_URL, not to the cluster of --sustained; expected one of the two")
	}
	for _, v := range f.settings {
		st, err := suite.ParseServerSetting(v)
		if err != nil {
			return f, fmt.Errorf("--server-setting: %w", err)
		}
		f.serverSettings = append(f.serverSettings, st)
	}
	var known []string
	for _, s := range suite.Scenarios() {
		known = append(known, s.ID)
	}
	for _, id := range f.selected() {
		if !slices.Contains(known, id) {
			return f, fmt.Errorf("--scenarios: unknown scenario %q; expected some of %s", id, strings.Join(known, ","))
		}
	}
	return f, nil
}

func (f flags) selected() []string {
	if f.scenarios == "" {
		return nil
	}
	return strings.Split(f.scenarios, ",")
}

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	f, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "almanac-bench:", err)
		return exitUsage
	}
	out := &output{stdout: stdout, stderr: stderr, json: f.json, terminal: isTerminal(stderr)}
	if f.sustained > 0 {
		return sustained(ctx, f, out)
	}
	cfg, err := pgxpool.ParseConfig(getenv("DATABASE_URL"))
	if err != nil {
		// The URL may hold a password: it is not repeated.
		fmt.Fprintln(stderr, "almanac-bench: DATABASE_URL is malformed; expected e.g. postgres://user@host:5432/dbname")
		return exitUsage
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = pool.Ping(pingCtx)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(stderr, "almanac-bench: cannot reach the database at %s:%d: %v\n", cfg.ConnConfig.Host, cfg.ConnConfig.Port, errors.Unwrap(err))
		return exitUnavailable
	}
	defer pool.Close()

	opts := suite.Options{Pool: pool, Quick: f.quick, Repeats: f.repeats, Workers: f.workers, Scenarios: f.selected(),
		Pgbench: f.pgbench, HoldSnapshot: f.hold, OnRow: out.row, Progress: out.progress}
	// The almanac command line of the memory scenario reaches the same
	// database: the URL this command was given, else the same PG* variables.
	if url := getenv("DATABASE_URL"); url != "" {
		opts.Env = append(os.Environ(), "DATABASE_URL="+url)
	}
	if f.almanac != "" {
		opts.CLI = []string{f.almanac}
	} else if p, err := exec.LookPath("almanac"); err == nil {
		opts.CLI = []string{p}
	}
	out.start()
	began := time.Now()
	rep, err := suite.Run(ctx, opts)
	out.took = time.Since(began)
	out.clearProgress()
	if rep.Server != "" || err == nil {
		out.end(rep)
		if werr := writeCharts(f.svg, rep, nil); werr != nil {
			fmt.Fprintln(stderr, "almanac-bench:", werr)
		}
	}
	switch {
	case rep.Interrupted:
		fmt.Fprintln(stderr, "almanac-bench: interrupted; the rows above are what was measured")
		return exitInterrupted
	case err != nil:
		fmt.Fprintln(stderr, "almanac-bench:", err)
		return exitFailed
	}
	return exitOK
}

// sustained runs the sustained scenario alone.
func sustained(ctx context.Context, f flags, out *output) int {
	rep, err := suite.RunSustained(ctx, suite.SustainedOptions{
		Duration: f.sustained, Period: f.period, Workers: f.workers, Quick: f.quick, Settings: f.serverSettings,
		OnPeriod: out.period, Progress: out.progress,
	})
	out.clearProgress()
	if len(rep.Periods) > 0 {
		out.sustainedEnd(rep)
		if werr := writeCharts(f.svg, suite.Report{}, &rep); werr != nil {
			fmt.Fprintln(out.stderr, "almanac-bench:", werr)
		}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(out.stderr, "almanac-bench: interrupted; the periods above are what was measured")
		return exitInterrupted
	case errors.Is(err, suite.ErrInvalid):
		fmt.Fprintln(out.stderr, "almanac-bench:", err)
		return exitUsage
	case err != nil:
		fmt.Fprintln(out.stderr, "almanac-bench:", err)
		return exitFailed
	}
	return exitOK
}

// writeCharts writes the charts of what was measured into dir ("" for
// none).
func writeCharts(dir string, rep suite.Report, sus *suite.SustainedReport) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	charts := map[string][]byte{}
	if len(rep.Rows) > 0 {
		charts["throughput.svg"] = suite.ThroughputSVG(rep)
		charts["times.svg"] = suite.TimesSVG(rep)
		charts["series-scale.svg"] = suite.SeriesScaleSVG(rep)
	}
	if sus != nil {
		charts["sustained.svg"] = suite.SustainedSVG(*sus)
	}
	for name, svg := range charts {
		if svg == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), svg, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// output prints rows as they finish: aligned lines, or JSON lines.
type output struct {
	stdout, stderr io.Writer
	json, terminal bool
	progressShown  bool
	took           time.Duration // the run's wall time, for its end
}

// line is one JSON line: its kind, then the object's own fields.
type line struct {
	Kind string `json:"kind"`
	*suite.Row
	*suite.Period
	*suite.SustainedReport
	Interrupted bool     `json:"interrupted,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	// Took is the run's wall time in seconds, on its end line.
	Took float64 `json:"took_seconds,omitempty"`
}

func (o *output) emit(l line) {
	o.clearProgress()
	b, _ := json.Marshal(l) // plain data: cannot fail
	fmt.Fprintln(o.stdout, string(b))
}

func (o *output) start() {
	if !o.json {
		fmt.Fprintln(o.stdout, suite.HeaderLine())
	}
}

func (o *output) row(r suite.Row) {
	if o.json {
		o.emit(line{Kind: "row", Row: &r})
		return
	}
	o.clearProgress()
	fmt.Fprintln(o.stdout, r.Line())
}

func (o *output) period(p suite.Period) {
	if o.json {
		o.emit(line{Kind: "period", Period: &p})
		return
	}
	o.clearProgress()
	fmt.Fprintln(o.stdout, p.Line())
}

func (o *output) end(rep suite.Report) {
	if o.json {
		o.emit(line{Kind: "end", Interrupted: rep.Interrupted, Notes: rep.Notes, Took: o.took.Seconds()})
		return
	}
	fmt.Fprintf(o.stdout, "\nPostgreSQL %s, %d repeat(s), %s; medians; ratio = almanac / baseline; spread = half the range of almanac's samples\n\n",
		rep.Server, rep.Repeats, o.took.Round(time.Second))
	_ = rep.WriteTable(o.stdout)
}

func (o *output) sustainedEnd(rep suite.SustainedReport) {
	if o.json {
		r := rep
		r.Periods = nil // already printed, one per line
		o.emit(line{Kind: "sustained", SustainedReport: &r})
		return
	}
	fmt.Fprintln(o.stdout)
	fmt.Fprintln(o.stdout, rep.Summary())
}

// progress shows how far the running scenario has got, on a terminal.
func (o *output) progress(scenario string, done, total int64) {
	if !o.terminal {
		return
	}
	fmt.Fprintf(o.stderr, "\r\033[K%s: %d of %d measurements", scenario, done, total)
	o.progressShown = true
}

func (o *output) clearProgress() {
	if o.progressShown {
		fmt.Fprint(o.stderr, "\r\033[K")
		o.progressShown = false
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
