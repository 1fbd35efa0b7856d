package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	env                            []string
	envAll, once                   bool
}

// defaultTimeout is --timeout's default: long enough for the hourly and
// daily jobs a sidecar runs, short enough that a hung command (a network
// call without a timeout) gives its slot back the same hour instead of
// holding it, lease renewed, for ever.
const defaultTimeout = "1h"

func (a *app) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run NAME --interval P [flags] -- CMD [ARGS...]",
		Short: "The sidecar: run a command once per due slot of a series",
		Long: `Run CMD once for every due slot of the series. Slots are materialized when due
(slot_end + --lag <= now, or on --schedule), held in lease mode with
heartbeats, and each slot runs once however many 'almanac run' processes
work on the series. The series is registered if it does not exist; if it
exists with another zone or origin, run refuses (exit 2).

CMD is checked before anything is written: a command that is not found, not
executable or a directory is refused (exit 2). It gets a minimal environment,
never the database URL or its password: PATH, HOME, USER, LOGNAME, SHELL,
LANG, TZ, TMPDIR, the LC_* variables, and the slot in ALMANAC_NAME,
ALMANAC_INTERVAL, ALMANAC_SLOT, ALMANAC_SLOT_START, ALMANAC_SLOT_END,
ALMANAC_ATTEMPT, ALMANAC_GENERATION, ALMANAC_FENCE, ALMANAC_KEY (once per
slot) and ALMANAC_COMPUTATION_KEY (once per computation: it changes when the
slot is re-opened, and ALMANAC_ATTEMPT starts again at 1). --env NAME passes
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

With --once: materialize what is due, run the slots in range (--from/--to, else
from the earliest stored slot to the last due one), waiting for slots other
processes hold and riding out database faults, then exit 0 if every slot in
range is complete or skipped, and 1 (saying how many are left and why) if any
failed, is parked, or was still running elsewhere when a signal stopped it.

With --http ADDR: serve Prometheus metrics on /metrics (docs/operations.md
lists them), /healthz (200 while the process runs) and /readyz (200 once the
database answers, the schema is migrated and the job is registered; 503 with
the reason otherwise). A bare port binds to 127.0.0.1.`,
		Example: `  almanac run sensor_report --interval PT5M --lag PT1M -- ./report.sh
  almanac run billing --interval P1D --tz Europe/Berlin --schedule 'CRON_TZ=Europe/Berlin 30 2 * * *' --workers 2 --env BILLING_API_URL -- ./bill
  almanac run backfill --interval P1D --from 2026-01-01 --to 2026-01-08 --once --workers 4 --timeout PT10M -- python3 fill.py
  almanac run sensor_report --interval PT5M --http 127.0.0.1:0 --log-format json --log-level debug -- ./report.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 1 || len(args) < 2 {
				return usagef("almanac run expects NAME, then -- and the command to run, e.g. almanac run report --interval PT5M -- ./report.sh")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runSidecar(cmd, f, args[0], args[1], args[2:])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M (required)")
	fl.StringVar(&f.tz, "tz", "", "IANA time zone of a new series (default UTC, or the registered one)")
	fl.StringVar(&f.origin, "origin", "", "origin of a new series (default 2000-01-01T00:00 local, or the registered one)")
	fl.StringVar(&f.from, "from", "", "run only slots starting at or after this time (default: from the earliest stored slot, else the last due one)")
	fl.StringVar(&f.to, "to", "", "cover only slots starting before this time (a backfill of a fixed range)")
	fl.StringVar(&f.schedule, "schedule", "", "cron spec of when to materialize due slots (default: whenever a slot becomes due)")
	fl.StringVar(&f.lag, "lag", "0s", "how long after its end a slot becomes due, e.g. PT1M or 1m")
	fl.StringVar(&f.catchUp, "catch-up", "all", "slots missed during downtime: all, none or latest:N")
	fl.IntVar(&f.workers, "workers", 1, "commands running at once")
	fl.StringVar(&f.timeout, "timeout", defaultTimeout, "limit per command run, e.g. PT10M, after which it is stopped and the run fails; without one a hung command would hold its slot for ever (0: no limit)")
	fl.StringVar(&f.leaseTTL, "lease-ttl", "30s", "lease length; heartbeats renew it every third of it")
	fl.StringVar(&f.grace, "grace", "10s", "time between SIGTERM and SIGKILL when stopping a command")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "park a slot after this many failures (0: never)")
	fl.IntVar(&f.skipExit, "skip-exit-code", defaults.SkipExitCode, "exit status with which the command marks its slot SKIP")
	fl.StringArrayVar(&f.env, "env", nil, "NAME: pass this variable of almanac's environment to the command; NAME=value: set it (repeatable)")
	fl.BoolVar(&f.envAll, "env-all", false, "pass almanac's whole environment to the command, except the variables holding database credentials (see above) not named with --env")
	fl.BoolVar(&f.once, "once", false, "run what is due, then exit: 0 if nothing failed, 1 otherwise")
	fl.StringVar(&f.http, "http", "", "serve Prometheus /metrics, /healthz and /readyz on HOST:PORT (a bare PORT binds to 127.0.0.1)")
	return cmd
}

// parseDuration reads a duration flag as ISO-8601 (PT1M) or Go syntax (1m).
// Calendar parts are refused: their length depends on the date.
func parseDuration(flag, text string) (time.Duration, error) {
	if strings.HasPrefix(text, "P") || strings.HasPrefix(text, "-P") {
		iv, err := slot.ParseInterval(text)
		if err != nil {
			return 0, usageError(fmt.Errorf("--%s: %w", flag, err))
		}
		if !iv.Fixed() {
			return 0, usagef("--%s %q has a calendar part; use hours, e.g. PT24H", flag, text)
		}
		return iv.Clock(), nil
	}
	d, err := time.ParseDuration(text)
	if err != nil || d < 0 {
		return 0, usagef("--%s %q: expected a duration such as PT1M or 90s", flag, text)
	}
	return d, nil
}

func (a *app) runSidecar(cmd *cobra.Command, f runFlags, name, program string, args []string) error {
	ctx := cmd.Context()
	// Everything the command line says is checked before anything is written.
	if err := input.CheckName(name); err != nil {
		return usageError(err)
	}
	if f.interval == "" {
		return usagef("--interval is required, e.g. --interval PT5M")
	}
	iv, err := slot.ParseInterval(f.interval)
	if err != nil {
		return usageError(fmt.Errorf("--interval: %w", err))
	}
	var lag, timeout, leaseTTL, grace time.Duration
	for _, d := range []struct {
		flag, text string
		into       *time.Duration
	}{{"lag", f.lag, &lag}, {"timeout", f.timeout, &timeout}, {"lease-ttl", f.leaseTTL, &leaseTTL}, {"grace", f.grace, &grace}} {
		if *d.into, err = parseDuration(d.flag, d.text); err != nil {
			return err
		}
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
	a.concurrency, a.shutdownTimeout, a.logs = f.workers, grace, true
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
	grid, err := a.sidecarGrid(ctx, c, name, iv, f)
	if err != nil {
		return err
	}
	var start, end time.Time
	if f.from != "" {
		if start, err = slot.ParseTime(f.from, grid.Location()); err != nil {
			return usageError(fmt.Errorf("--from: %w", err))
		}
	}
	if f.to != "" {
		if end, err = slot.ParseTime(f.to, grid.Location()); err != nil {
			return usageError(fmt.Errorf("--to: %w", err))
		}
		if !start.IsZero() && end.Before(start) {
			return usagef("--from %s is after --to %s: expected from <= to", f.from, f.to)
		}
		if !start.IsZero() {
			// Every slot of the range must exist (end by slot.MaxTime()).
			if _, err := grid.Count(start, end); err != nil {
				return usageError(fmt.Errorf("--from and --to: %w", err))
			}
		}
	}

	job := almanac.Job{
		Series: grid, Schedule: f.schedule, CatchUp: catchUp, From: start, To: end,
		LeaseHandler: command.LeaseHandler(),
		Policy:       almanac.Policy{Lag: lag, LeaseTTL: leaseTTL, StopBefore: stopBefore, MaxAttempts: f.maxAttempts},
	}
	if err := c.Register(job); err != nil {
		return usageError(err)
	}
	if addr != "" {
		stop, err := a.serveOps(addr, opsMux(c, registry, almanac.ReadyOptions{Jobs: true}))
		if err != nil {
			return err
		}
		defer stop()
	}
	logger := a.logger()
	logger.Info("almanac: sidecar starting", "series", name, "interval", iv.String(), "workers", f.workers,
		"timeout", timeout, "once", f.once, "command", program)
	defer logger.Info("almanac: sidecar stopped", "series", name, "interval", iv.String())
	if f.once {
		_, err := c.Drain(ctx)
		if errors.Is(err, almanac.ErrIncomplete) {
			return problemError(err)
		}
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	// A graceful stop: running commands get --grace, then their slots are
	// released for another process.
	return c.Stop(context.WithoutCancel(ctx))
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
