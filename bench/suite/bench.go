package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Options.
const (
	DefaultRepeats = 3
	DefaultWorkers = 8
	// MaxWorkers bounds Options.Workers: each worker holds a connection,
	// and River's pool gets as many while almanac's pool stays open, all
	// within PostgreSQL's default max_connections of 100.
	MaxWorkers = 32
)

// ErrInvalid is wrapped by the errors Run returns for options it refuses
// before touching the database.
var ErrInvalid = errors.New("invalid benchmark options")

// Options configure a run.
type Options struct {
	// Pool reaches the database to benchmark. Scenarios use it to set up
	// their tables, and open warm pools of their own sizes from its
	// configuration for the measurements.
	Pool *pgxpool.Pool
	// Quick runs a small version of every scenario, in seconds: it proves
	// the suite works; its figures mean little and no bar is judged.
	Quick bool
	// Repeats is how many times each side of a row is measured. Default 3.
	Repeats int
	// Workers is the concurrency of the locked, batched and lease
	// scenarios. Default 8.
	Workers int
	// Scenarios selects scenarios by ID (see Scenarios); empty means all
	// but the opt-in ones, which run only when named: materialize-10m, and
	// series-scale but in a quick run.
	Scenarios []string
	// Env is the environment of the almanac command line the memory
	// scenario runs: it must let it reach the same database, through
	// DATABASE_URL or the libpq PG* variables. Default os.Environ().
	Env []string
	// CLI is the command that runs almanac's command line (the program and
	// any arguments that go before almanac's own), for the memory scenario.
	// Empty: those rows are skipped, saying so.
	CLI []string
	// Pgbench is the pgbench program for the ceilings. Default: pgbench on
	// PATH, else in /usr/lib/postgresql/*/bin. Not found: the rows have no
	// ceiling and say why.
	Pgbench string
	// HoldSnapshot keeps a transaction with its snapshot open for the whole
	// run, as a long job, report or backup does elsewhere in a cluster:
	// meanwhile no index entry of a row updated since can be marked dead,
	// and a search that starts from the beginning of a queue steps over
	// all of them. The report says so in its notes.
	HoldSnapshot bool
	// OnRow, if set, is called with every row as soon as its scenario has
	// measured it, before the next scenario starts.
	OnRow func(Row)
	// Progress, if set, is told after each measurement how far the running
	// scenario has got.
	Progress func(scenario string, done, total int64)
}

// Scenario describes one scenario.
type Scenario struct {
	ID    string
	About string
}

// scenario is a Scenario and how to run it.
type scenario struct {
	Scenario
	// optIn scenarios run only when selected by Options.Scenarios, or,
	// when quickToo is set, in a quick run.
	optIn, quickToo bool
	// steps is the number of measurements the scenario takes, for progress.
	steps func(e *env) int
	run   func(ctx context.Context, e *env) ([]Row, error)
}

var scenarios = []scenario{
	{Scenario{"locked", "locked mode, one slot per transaction, vs the same SQL from a raw pgx loop and pgbench"}, false, false,
		func(e *env) int { return 3 * e.repeats }, runLocked},
	{Scenario{"batch", "batched locked mode vs River, the same SQL from a raw pgx loop, and pgbench"}, false, false,
		func(e *env) int { return 4 * e.repeats }, runBatch},
	{Scenario{"lease", "lease mode, batched claims and completions, vs River and pgbench"}, false, false,
		func(e *env) int { return 3 * e.repeats }, runLease},
	{Scenario{"fleet", "batched locked and lease mode with the workers spread over 2, 4 and 8 processes vs all of them in one"}, false, false,
		func(e *env) int { return 2 * len(fleetModes) * len(fleetProcesses) * e.repeats }, runFleet},
	{Scenario{"gaps", "gap detection, complete and with holes, vs a lead() window query and a NOT EXISTS anti-join"}, false, false,
		func(e *env) int { return 6 * e.repeats }, runGaps},
	{Scenario{"materialize", "materialize 1M slots vs one INSERT … SELECT generate_series"}, false, false,
		func(e *env) int { return 2 * e.repeats }, runMaterialize},
	{Scenario{"materialize-10m", "the same over 10M slots, the bar's size (about 2 minutes a repeat; only when selected)"}, true, false,
		func(e *env) int { return 2 * e.repeats }, runMaterialize10M},
	{Scenario{"wake", "re-open commit to an idle worker starting the slot, vs a bare NOTIFY"}, false, false,
		func(e *env) int { return 2 * e.repeats }, runWake},
	{Scenario{"scaling", "locked and lease throughput by workers, gap detection by size"}, false, false,
		func(e *env) int {
			return (4*len(e.size.scaleWorkers) + 2*len(e.size.scaleGaps)) * e.repeats
		}, runScaling},
	{Scenario{"memory", "peak RSS of the sidecar and of gap detection over a big series vs a small one"}, false, false,
		func(e *env) int { return 4 * e.repeats }, runMemory},
	{Scenario{"series-scale", "1k, 10k, 100k idle PT1M series and jobs in one process vs a River periodic job per tenant: start-up, " +
		"transactions/s, cores and RSS at rest, boundary latency; a cluster of its own, about 30 minutes, so only when selected " +
		"(--quick: 200 PT5S series, also unselected)"}, true, true,
		scaleSteps, runSeriesScale},
}

// Scenarios returns the scenarios in the order Run runs them.
func Scenarios() []Scenario {
	out := make([]Scenario, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.Scenario
	}
	return out
}

// Run runs the selected scenarios and returns their rows, each also given
// to Options.OnRow as soon as it is measured. A missed bar is a row, not an
// error; an error means a scenario could not run (a database error, a slot
// or job that ran twice or never). When ctx is cancelled (an interrupted
// run) the report holds the rows measured until then, Interrupted is set,
// and the error wraps ctx's.
func Run(ctx context.Context, opts Options) (Report, error) {
	if err := check(&opts); err != nil {
		return Report{}, err
	}
	e := &env{opts: opts, repeats: opts.Repeats, workers: opts.Workers, size: fullSizes, admin: opts.Pool, canCheckpoint: true}
	if opts.Quick {
		e.size = quickSizes
	}
	defer func() { e.pgbench.close() }()
	rep := Report{Quick: opts.Quick, Repeats: opts.Repeats, Workers: opts.Workers}
	if err := opts.Pool.QueryRow(ctx, "SHOW server_version").Scan(&rep.Server); err != nil {
		return Report{}, fmt.Errorf("bench: server version: %w", err)
	}
	if opts.Quick {
		rep.Notes = append(rep.Notes, "quick run: the sizes are far below those the bars are set for, so no row is judged")
	}
	if opts.HoldSnapshot {
		release, err := holdSnapshot(ctx, opts.Pool)
		if err != nil {
			return Report{}, fmt.Errorf("bench: %w", err)
		}
		defer release()
		rep.Notes = append(rep.Notes, "a transaction held its snapshot open for the whole run (--hold-snapshot)")
	}
	for _, s := range scenarios {
		selected := slices.Contains(opts.Scenarios, s.ID)
		if !selected && (len(opts.Scenarios) > 0 || s.optIn && !(s.quickToo && opts.Quick)) {
			continue
		}
		e.scenario, e.done, e.total = s.ID, 0, int64(s.steps(e))
		rows, err := s.run(ctx, e)
		if err != nil {
			if ctx.Err() != nil {
				rep.Interrupted = true
				rep.Notes = append(rep.Notes, fmt.Sprintf("interrupted during %s: later scenarios were not run", s.ID))
			}
			return rep, fmt.Errorf("bench: %s: %w", s.ID, err)
		}
		for i := range rows {
			rows[i].Scenario = s.ID
			switch {
			case rows[i].Result == Skipped:
			case opts.Quick:
				rows[i].Result = Info
			default:
				rows[i].judge()
			}
			if opts.OnRow != nil {
				opts.OnRow(rows[i])
			}
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	if !e.canCheckpoint {
		rep.Notes = append(rep.Notes, "CHECKPOINT is not permitted to this role: a checkpoint may have landed inside a measurement")
	}
	return rep, nil
}

func check(opts *Options) error {
	if opts.Pool == nil {
		return fmt.Errorf("%w: no database pool", ErrInvalid)
	}
	if opts.Repeats == 0 {
		opts.Repeats = DefaultRepeats
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Repeats < 1 {
		return fmt.Errorf("%w: %d repeats; expected at least 1", ErrInvalid, opts.Repeats)
	}
	if opts.Workers < 1 || opts.Workers > MaxWorkers {
		return fmt.Errorf("%w: %d workers; expected 1 to %d", ErrInvalid, opts.Workers, MaxWorkers)
	}
	for _, id := range opts.Scenarios {
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.ID == id }) {
			return fmt.Errorf("%w: unknown scenario %q", ErrInvalid, id)
		}
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	return nil
}
