package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/schedule"
	"github.com/almanacdev/almanac/slot"
)

type runFlags struct {
	interval, tz, origin, from, to string
	schedule, lag, catchUp, http   string
	timeout, leaseTTL, grace       string
	workers, maxAttempts, skipExit int
	env, series                    []string
	envAll, once, all              bool
	like, refresh                  string
}

// defaultRefresh is --refresh's default: a series added to the table is
// served within a minute, at one statement a minute.
const defaultRefresh = "1m"

// defaultTimeout is --timeout's default: long enough for the hourly and
// daily jobs a sidecar runs, short enough that a hung command (a network
// call without a timeout) gives its slot back the same hour instead of
// holding it, lease renewed, for ever.
const defaultTimeout = "1h"

func (a *app) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run NAME... --interval P [flags] -- CMD [ARGS...]",
		Short: "The sidecar: run a command once per due slot of one or many series",
		Long: `Run CMD once for every due slot of the series. Slots are materialized when due
(slot_end + --lag <= now, or on --schedule), held in lease mode with
heartbeats, and each slot runs once however many 'almanac run' processes
work on the series. The series is registered if it does not exist; if it
exists with another zone or origin, run refuses (exit 2).

One process serves many series of one --interval: the names given (NAME...
or --series NAME, repeatable), or the registered series whose name matches
--like (SQL LIKE: % any characters, _ one, \ escapes; case-sensitive), or
every registered series of the interval (--all). --like and --all read the
series table again every --refresh and on SIGHUP: a series added later is
served without a restart, one removed from the table stops being served.
A new set is served by new workers at once, while the running commands of
the previous set finish. --workers bounds the commands running at once
across all series.

CMD is checked before anything is written: a command that is not found, not
executable or a directory is refused (exit 2). It gets a minimal environment,
never the database URL or its password: PATH, HOME, USER, LOGNAME, SHELL,
LANG, TZ, TMPDIR, the LC_* variables, and the slot in ALMANAC_SERIES (the
series name, also in ALMANAC_NAME), ALMANAC_INTERVAL, ALMANAC_SLOT,
ALMANAC_SLOT_START, ALMANAC_SLOT_END, ALMANAC_ATTEMPT, ALMANAC_GENERATION,
ALMANAC_FENCE, ALMANAC_KEY (once per slot) and ALMANAC_COMPUTATION_KEY (once per computation: it changes when the
slot is re-opened, and ALMANAC_ATTEMPT starts again at 1). A series with
upstream series (--after) also gets ALMANAC_UPSTREAM, the upstream slots the
slot covers, one "<name> <slot> <generation>" per line (at most 64 KiB of
whole lines), and ALMANAC_UPSTREAM_COUNT, their number. --env NAME passes
one more variable of almanac's environment (if set), --env NAME=value sets
one, and --env-all passes everything but the variables that hold database
credentials, which pass only when named with --env: DATABASE_URL, the
ALMANAC_*_URL, the PG* variables, and every variable whose value holds a
PostgreSQL URL (postgres:// or postgresql://, also inside a JDBC URL), a
libpq keyword (host=, hostaddr=, dbname=, password=, passfile=, service=)
or the password almanac connects with.

CMD gets no other open file than its standard input, output and error. On
Linux almanac makes itself non-dumpable when it starts a command: a process
of the same user, CMD included, cannot read almanac's environment or memory
(/proc/PID/environ, ptrace), which also means no core dumps and debuggers
attaching only as root. Every local user can still read almanac's command
line, so almanac warns when --database-url holds a password. Run CMD as
another user for a stronger boundary (docs/deployment.md).

Exit status 0 completes the slot, --skip-exit-code skips it, anything else (or
a signal) is a failure retried with backoff; the last 3 KiB of stderr, with
passwords redacted, is kept as the slot's message.

CMD runs under a supervisor in a process group of its own. On lease loss, at
--timeout and when almanac stops, the group gets SIGTERM, then SIGKILL after
--grace. If almanac dies in any way, SIGKILL included, its commands are
killed at once. On Linux this reaches every descendant, also those that left
the process group, and whatever CMD leaves running when it exits. Should
almanac be frozen (SIGSTOP) past its lease, another process may run the slot
while the old command still runs, until almanac resumes and kills it: pass
ALMANAC_FENCE to systems that can refuse a writer with a smaller token.

SIGTERM or SIGINT stops acquiring, lets running commands finish within
--grace, then stops them; their slots are released for another process. A
second signal kills the running commands and exits at once (status 130);
their leases expire and other processes redo those slots.

With --once: materialize what is due, run the slots in range of every series
served (--from/--to, else from the earliest stored slot to the last due one), waiting for slots other
processes hold and riding out database faults, then exit 0 if every slot in
range is complete or skipped, and 1 (saying how many are left and why) if any
failed, is parked, or was still running elsewhere when a signal stopped it.

With --http ADDR: serve Prometheus metrics on /metrics (docs/operations.md
lists them), /healthz (200 while the process runs) and /readyz (200 once the
database answers, the schema is migrated and a series is served; 503 with
the reason otherwise). A bare port binds to 127.0.0.1.

With --log-format json every line almanac run writes is a JSON record: its
events, the signal notices, the final error, and each line of CMD's output
(the line as the message, with series, interval, slot, start, attempt and
stream as attributes; passwords redacted). Durations are in seconds, under
a key ending in _s ("timeout_s": 3600).`,
		Example: `  almanac run sensor_report --interval PT5M --lag 1m -- ./report.sh
  almanac run billing --interval P1D --tz Europe/Berlin --schedule 'CRON_TZ=Europe/Berlin 30 2 * * *' --workers 2 --env BILLING_API_URL -- ./bill
  almanac run backfill --interval P1D --from 2026-01-01 --to 2026-01-08 --once --workers 4 --timeout 10m -- python3 fill.py
  almanac run sensor_report --interval PT5M --http 127.0.0.1:0 --log-format json --log-level debug -- ./report.sh
  almanac run eu_report us_report --interval P1D -- ./report.sh
  almanac run --like 'tenant\_%' --interval PT1H --workers 8 -- ./report.sh
  almanac run --all --interval P1D --once -- ./report.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			// With --log-format json, even this refusal is a record.
			a.logs = true
			dash := cmd.ArgsLenAtDash()
			if dash < 0 || len(args) <= dash {
				return usagef("%s", runExpects)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			return a.runSidecar(cmd, f, args[:dash], args[dash], args[dash+1:])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M (required)")
	fl.StringVar(&f.tz, "tz", "", "IANA time zone of a new series (default UTC, or the registered one)")
	fl.StringVar(&f.origin, "origin", "", "origin of a new series (default 2000-01-01T00:00 local, or the registered one)")
	fl.StringVar(&f.from, "from", "", "run only slots starting at or after this time (default: from the earliest stored slot, else the last due one)")
	fl.StringVar(&f.to, "to", "", "cover only slots starting before this time (a backfill of a fixed range)")
	fl.StringVar(&f.schedule, "schedule", "", "cron spec of when to materialize due slots (default: whenever a slot becomes due)")
	fl.StringVar(&f.lag, "lag", "0s", "how long after its end a slot becomes due: "+input.DurationSyntax)
	fl.StringVar(&f.catchUp, "catch-up", "all", "slots missed during downtime: all, none or latest:N")
	fl.IntVar(&f.workers, "workers", 1, "commands running at once")
	fl.StringVar(&f.timeout, "timeout", defaultTimeout, "limit per command run, e.g. 10m, after which it is stopped and the run fails; without one a hung command would hold its slot for ever (0: no limit)")
	fl.StringVar(&f.leaseTTL, "lease-ttl", "30s", "lease length; heartbeats renew it every third of it")
	fl.StringVar(&f.grace, "grace", "10s", "time between SIGTERM and SIGKILL when stopping a command")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "park a slot after this many failures (0: never)")
	fl.IntVar(&f.skipExit, "skip-exit-code", defaults.SkipExitCode, "exit status with which the command marks its slot SKIP")
	fl.StringArrayVar(&f.env, "env", nil, "NAME: pass this variable of almanac's environment to the command; NAME=value: set it (repeatable)")
	fl.BoolVar(&f.envAll, "env-all", false, "pass almanac's whole environment to the command, except the variables holding database credentials (see above) not named with --env")
	fl.BoolVar(&f.once, "once", false, "run what is due, then exit: 0 if nothing failed, 1 otherwise")
	fl.StringVar(&f.http, "http", "", "serve Prometheus /metrics, /healthz and /readyz on HOST:PORT (a bare PORT binds to 127.0.0.1)")
	fl.StringArrayVar(&f.series, "series", nil, "a series to serve, besides the NAMEs given (repeatable)")
	fl.StringVar(&f.like, "like", "", "serve the registered series of --interval whose name matches this SQL LIKE pattern, e.g. 'tenant\\_%', followed as the table changes")
	fl.BoolVar(&f.all, "all", false, "serve every registered series of --interval, followed as the table changes")
	fl.StringVar(&f.refresh, "refresh", defaultRefresh, "how often --like and --all read the series table again (also on SIGHUP)")
	return cmd
}

// runExpects is the message of a command line that names no series or no
// command.
const runExpects = "almanac run expects NAME, then -- and the command to run, e.g. almanac run report --interval PT5M -- ./report.sh; or --series NAME, --like PATTERN or --all instead of NAME"

// parseDuration reads a duration flag as every command does
// (input.ParseDuration: 90s, 1h30m, 2d, PT10M, P1D; a day is 24 hours).
func parseDuration(flag, text string) (time.Duration, error) { return durationFlag("--"+flag, text) }

func (a *app) runSidecar(cmd *cobra.Command, f runFlags, names []string, program string, args []string) error {
	ctx := cmd.Context()
	// From here on, with --log-format json, even a refusal is a record.
	a.logs = true
	// Everything the command line says is checked before anything is written.
	names = append(names, f.series...)
	kinds := 0
	for _, given := range []bool{len(names) > 0, f.like != "", f.all} {
		if given {
			kinds++
		}
	}
	switch {
	case kinds == 0:
		return usagef("%s", runExpects)
	case kinds > 1:
		return usagef("almanac run serves the series named, --like PATTERN or --all: expected one of them, not several")
	}
	seen := map[string]bool{}
	for _, name := range names {
		if err := input.CheckName(name); err != nil {
			return usageError(err)
		}
		if seen[name] {
			return usagef("series %s is given twice: expected each name once", input.PrintableName(name))
		}
		seen[name] = true
	}
	var like *regexp.Regexp
	describe := fmt.Sprintf("%d series named", len(names))
	if f.like != "" || f.all {
		if f.tz != "" || f.origin != "" {
			return usagef("--tz and --origin place the series named on the command line; --like and --all serve registered series as they are")
		}
		pattern := f.like
		describe = "--like " + f.like
		if f.all {
			pattern, describe = "%", "--all"
		}
		var err error
		if like, err = likeMatcher(pattern); err != nil {
			return err
		}
	}
	if f.interval == "" {
		return usagef("--interval is required, e.g. --interval PT5M")
	}
	iv, err := slot.ParseInterval(f.interval)
	if err != nil {
		return usageError(fmt.Errorf("--interval: %w", err))
	}
	var lag, timeout, leaseTTL, grace, refresh time.Duration
	for _, d := range []struct {
		flag, text string
		into       *time.Duration
	}{{"lag", f.lag, &lag}, {"timeout", f.timeout, &timeout}, {"lease-ttl", f.leaseTTL, &leaseTTL}, {"grace", f.grace, &grace}, {"refresh", f.refresh, &refresh}} {
		if *d.into, err = parseDuration(d.flag, d.text); err != nil {
			return err
		}
	}
	if refresh <= 0 {
		return usagef("--refresh %q: expected a positive duration such as 1m", f.refresh)
	}
	if leaseTTL < time.Second {
		return usagef("--lease-ttl %q: expected at least 1s", f.leaseTTL)
	}
	// A sidecar cut off from the database stops its command before its
	// lease can expire: SIGTERM, then SIGKILL --grace later, with a second
	// to spare; at most half the lease before, so that a missed heartbeat
	// is not taken for a partition. (With a --grace that long, a command
	// that ignores SIGTERM may outlive the lease: keep --grace below half
	// of --lease-ttl, less a second.)
	stopBefore := min(grace+time.Second, leaseTTL/2-time.Millisecond)
	catchUp, err := parseCatchUp(f.catchUp)
	if err != nil {
		return usageError(fmt.Errorf("--catch-up: %w", err))
	}
	if f.workers < 1 || f.workers > 1000 {
		return usagef("--workers %d: expected 1 to 1000", f.workers)
	}
	if f.maxAttempts < 0 {
		return usagef("--max-attempts %d: expected 0 (never park) or more", f.maxAttempts)
	}
	if f.skipExit < 1 || f.skipExit > 255 {
		return usagef("--skip-exit-code %d: expected 1 to 255", f.skipExit)
	}
	if f.schedule != "" {
		if _, err := schedule.Parse(f.schedule); err != nil {
			return usageError(fmt.Errorf("--schedule: %w", err))
		}
	}
	for flag, text := range map[string]string{"origin": f.origin, "from": f.from, "to": f.to} {
		if text != "" {
			if err := slot.CheckTime(text); err != nil {
				return usageError(fmt.Errorf("--%s: %w", flag, err))
			}
		}
	}
	if f.tz != "" {
		if _, err := slot.LoadZone(f.tz); err != nil {
			return usageError(fmt.Errorf("--tz: %w", err))
		}
	}
	if f.from != "" || f.to != "" {
		// Checked again in each series' zone; this catches a bad range
		// before any series is known (--like with no match yet).
		utc, err := slot.NewSeries("range", iv, time.UTC, time.Time{})
		if err != nil {
			return usageError(fmt.Errorf("--interval: %w", err))
		}
		if _, _, err := runRange(utc, f); err != nil {
			return err
		}
	}
	command := almanac.Command{
		Path: program, Args: args, Env: f.env, EnvAll: f.envAll, SkipExitCode: f.skipExit, Timeout: timeout, Grace: grace,
		Stdout: a.stdout, Stderr: a.stderr,
	}
	// A command that cannot start would fail every slot it claims.
	if err := command.Check(); err != nil {
		if errors.Is(err, almanac.ErrInvalid) {
			err = fmt.Errorf("--env: %w", err) // an entry Check refused
		}
		return usageError(err)
	}
	var addr string
	if f.http != "" {
		if addr, err = httpAddr(f.http); err != nil {
			return err
		}
	}

	// Lease mode holds no connection while commands run: a worker uses one
	// for its claim or its outcome, and its heartbeat may overlap that; two
	// more serve the triggers and the batched completions. LISTEN has a
	// connection of its own.
	a.poolSize = int32(2*f.workers + 2)
	a.concurrency, a.shutdownTimeout = f.workers, grace
	var registry *prometheus.Registry
	if addr != "" {
		var meters *sdkmetric.MeterProvider
		if meters, registry, err = newMetrics(); err != nil {
			return err
		}
		a.meters = meters
	}
	c, err := a.connectMigrated(ctx)
	if err != nil {
		return err
	}
	set := map[string]almanac.Series{}
	for _, name := range names {
		if set[name], err = a.sidecarGrid(ctx, c, name, iv, f); err != nil {
			return err
		}
	}
	logger := a.logger()
	sc := &sidecar{a: a, base: c, clock: newStopClock(), grace: grace, log: logger, like: like, iv: iv, describe: describe}
	if like != nil {
		if set, err = sc.match(ctx); err != nil {
			return err
		}
	}

	// The command's output: prefixed lines, or records with the slot.
	permits := make(chan struct{}, f.workers)
	shared := command.LeaseHandler()
	var stdoutLog, stderrLog *slog.Logger
	if a.jsonLogs() {
		stdoutLog, stderrLog = a.jsonLogger(a.stdout), a.jsonLogger(a.stderr)
	}
	handler := func(ctx context.Context, l *almanac.Lease) error {
		// Within --workers across the clients of two sets (see sidecar).
		select {
		case permits <- struct{}{}:
			defer func() { <-permits }()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if stdoutLog == nil {
			return shared(ctx, l)
		}
		own := command
		own.Stdout, own.Stderr = slotOutput(stdoutLog, stderrLog, l)
		return own.LeaseHandler()(ctx, l)
	}
	sc.job = func(grid almanac.Series) (almanac.Job, error) {
		start, end, err := runRange(grid, f)
		if err != nil {
			return almanac.Job{}, err
		}
		return almanac.Job{
			Series: grid, Schedule: f.schedule, CatchUp: catchUp, From: start, To: end,
			LeaseHandler: handler,
			Policy:       almanac.Policy{Lag: lag, LeaseTTL: leaseTTL, StopBefore: stopBefore, MaxAttempts: f.maxAttempts},
		}, nil
	}
	// The jobs are built once before anything runs: a --from or --to that
	// does not fit a series is refused now.
	for _, grid := range set {
		if _, err := sc.job(grid); err != nil {
			return err
		}
	}
	if addr != "" {
		stop, err := a.serveOps(addr, sc.readyMux(opsMux(c, registry, almanac.ReadyOptions{})))
		if err != nil {
			return err
		}
		defer stop()
	}
	// One series is named by "series", as before there were many.
	which := []any{"selection", describe}
	if len(names) == 1 {
		which = []any{"series", names[0]}
	}
	logger.Info("almanac: sidecar starting", append(which, "series_count", len(set), "interval", iv.String(), "workers", f.workers,
		"timeout", timeout, "once", f.once, "command", program)...)
	defer logger.Info("almanac: sidecar stopped", append(which, "interval", iv.String())...)
	signalLog.Store(nilUnlessJSON(a, logger))
	if f.once {
		return a.runOnce(ctx, c, sc, set, logger)
	}
	// The clients that run the jobs wait for their commands when a new set
	// replaces them; a stop cuts that wait to --grace (stopClock.hurry).
	longWait := 100 * 365 * 24 * time.Hour
	if timeout > 0 {
		longWait = timeout + 2*grace + time.Minute
	}
	actor := a.actor
	if actor == "" {
		actor = a.operator()
	}
	sc.opts = almanac.Options{
		Schema: a.schema, Pooler: a.pooler, ListenURL: a.listenURL, RetryBudget: a.retryTimeout, Actor: actor,
		Logger: logger, Concurrency: f.workers, ShutdownTimeout: longWait, Clock: sc.clock,
	}
	if a.meters != nil {
		sc.opts.MeterProvider = workerMeters{a.meters}
	}
	return sc.serve(ctx, set, refresh)
}

// nilUnlessJSON is logger with --log-format json, else nil.
func nilUnlessJSON(a *app, logger *slog.Logger) *slog.Logger {
	if a.jsonLogs() {
		return logger
	}
	return nil
}

// runOnce is --once: every series served is drained by the base client.
func (a *app) runOnce(ctx context.Context, c *almanac.Client, sc *sidecar, set map[string]almanac.Series, logger *slog.Logger) error {
	if len(set) == 0 {
		logger.Warn("almanac: no series to serve; nothing to run", "selection", sc.describe, "interval", sc.iv.String())
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		j, err := sc.job(set[name])
		if err != nil {
			return err
		}
		if err := c.Register(j); err != nil {
			return usageError(err)
		}
	}
	sc.mu.Lock()
	sc.serving = set
	sc.mu.Unlock()
	_, err := c.Drain(ctx)
	if errors.Is(err, almanac.ErrIncomplete) {
		return problemError(err)
	}
	return err
}

// runRange reads --from and --to in the zone of grid.
func runRange(grid almanac.Series, f runFlags) (start, end time.Time, err error) {
	if f.from != "" {
		if start, err = slot.ParseTime(f.from, grid.Location()); err != nil {
			return start, end, usageError(fmt.Errorf("--from: %w", err))
		}
	}
	if f.to != "" {
		if end, err = slot.ParseTime(f.to, grid.Location()); err != nil {
			return start, end, usageError(fmt.Errorf("--to: %w", err))
		}
		if !start.IsZero() && end.Before(start) {
			return start, end, usagef("--from %s is after --to %s: expected from <= to", f.from, f.to)
		}
		if !start.IsZero() {
			// Every slot of the range must exist (end by slot.MaxTime()).
			if _, err := grid.Count(start, end); err != nil {
				return start, end, usageError(fmt.Errorf("--from and --to: %w", err))
			}
		}
	}
	return start, end, nil
}

// sidecarGrid returns the series grid: the registered one when --tz and
// --origin are not given, else the one the flags describe. A series
// registered with another zone or origin is refused. Nothing is written:
// the client registers a new series when it starts.
func (a *app) sidecarGrid(ctx context.Context, c *almanac.Client, name string, iv slot.Interval, f runFlags) (almanac.Series, error) {
	info, err := c.LookupSeries(ctx, name, iv.String())
	def := info.Series
	if err == nil && f.tz == "" && f.origin == "" {
		return def, nil
	}
	if err != nil && !errors.Is(err, almanac.ErrUnknownSeries) {
		return almanac.Series{}, err
	}
	tz := f.tz
	if tz == "" {
		tz = "UTC"
	}
	grid, gerr := parseGrid(name, f.interval, tz, f.origin)
	if gerr != nil {
		return almanac.Series{}, gerr
	}
	if err == nil && (def.Location().String() != grid.Location().String() || !def.Origin().Equal(grid.Origin())) {
		return almanac.Series{}, usageError(fmt.Errorf("%w: %s %s is registered with zone %s and origin %s, not zone %s and origin %s",
			almanac.ErrSeriesConflict, name, iv, def.Location(), slot.FormatTime(def.Origin()), grid.Location(), slot.FormatTime(grid.Origin())))
	}
	return grid, nil
}
