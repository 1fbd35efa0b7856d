package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac/internal/bench"
	"github.com/almanacdev/almanac/internal/progress"
)

type benchFlags struct {
	quick            bool
	repeats, workers int
	scenarios        []string
}

// benchCommand is `almanac bench`; BENCHMARKS.md has its results.
func (a *app) benchCommand() *cobra.Command {
	var f benchFlags
	var list strings.Builder
	for _, s := range bench.Scenarios() {
		fmt.Fprintf(&list, "  %-12s %s\n", s.ID, s.About)
	}
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--scenarios a,b] [--repeats N] [--workers N]",
		Short: "Benchmark almanac against raw SQL and River on this database",
		Long: `Measure almanac on this machine and database, each figure next to a baseline
measured in the same run: the same SQL sent by a bare pgx loop, River, the
naive SQL. Engine and baseline run alternately, each on a freshly loaded and
vacuumed table, --repeats times; the table quotes medians and the median of
the per-repeat ratios, with the bar the row must meet and whether it is met.

Scenarios:
` + list.String() + `
River is built from the bench/river module of a source checkout with the go
command; where that cannot be done, its rows say why and are skipped. The
full run takes several minutes and loads millions of rows; --quick runs small
versions in seconds. Every scenario works in schemas of its own
(almanac_bench_*), dropped when it is done; --schema is not used.

Exit status 0 when the suite ran, whether or not every bar was met.`,
		Example: `  almanac bench
  almanac bench --quick
  almanac bench --scenarios locked,gaps --repeats 5 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.bench(cmd, f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.quick, "quick", false, "run a small version of every scenario, in seconds")
	fl.IntVar(&f.repeats, "repeats", bench.DefaultRepeats, "measurements of each side of a row; the median is quoted")
	fl.IntVar(&f.workers, "workers", bench.DefaultWorkers, "workers of the locked, batched and lease scenarios")
	fl.StringSliceVar(&f.scenarios, "scenarios", nil, "comma-separated scenarios to run (default all)")
	return cmd
}

func (a *app) bench(cmd *cobra.Command, f benchFlags) error {
	ctx := cmd.Context()
	if f.repeats < 1 || f.repeats > 100 {
		return usagef("--repeats %d: expected 1 to 100", f.repeats)
	}
	if f.workers < 1 || f.workers > bench.MaxWorkers {
		return usagef("--workers %d: expected 1 to %d", f.workers, bench.MaxWorkers)
	}
	var known []string
	for _, s := range bench.Scenarios() {
		known = append(known, s.ID)
	}
	for _, id := range f.scenarios {
		if !slices.Contains(known, id) {
			return usagef("--scenarios: unknown scenario %q; expected some of %s", id, strings.Join(known, ","))
		}
	}
	pool, err := a.connect(ctx)
	if err != nil {
		return err
	}

	// Subprocesses reach the same database: the URL this command was
	// given, else the same PG* variables.
	env := os.Environ()
	if a.databaseURL != "" {
		env = append(env, "DATABASE_URL="+a.databaseURL)
	}
	opts := bench.Options{
		Pool: pool, Quick: f.quick, Repeats: f.repeats, Workers: f.workers, Scenarios: f.scenarios, Env: env,
	}
	if exe, err := os.Executable(); err == nil {
		opts.CLI = []string{exe}
	}
	var bar *progress.Bar
	current := ""
	opts.Progress = func(scenario string, done, total int64) {
		if scenario != current {
			bar.Clear()
			bar, current = progress.ForTerminal(a.stderr, "bench "+scenario, !a.json), scenario
		}
		bar.Set(done, total)
	}
	rep, err := bench.Run(ctx, opts)
	bar.Clear()
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(rep)
	}
	fmt.Fprintf(a.stdout, "PostgreSQL %s, %d repeat(s), medians; ratio = almanac / baseline\n\n", rep.Server, rep.Repeats)
	return rep.WriteTable(a.stdout)
}
