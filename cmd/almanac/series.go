package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

func (a *app) seriesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "series",
		Short: "Register and list series",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.seriesAddCommand(), a.seriesListCommand(), a.seriesSetCommand(),
		a.seriesPauseCommand(true), a.seriesPauseCommand(false), a.seriesDepsCommand())
	return cmd
}

// seriesJSON is the machine form of a series definition.
type seriesJSON struct {
	Name        string     `json:"name"`
	Interval    string     `json:"interval"`
	TimeZone    string     `json:"time_zone"`
	Origin      string     `json:"origin"`
	Lag         string     `json:"lag"`
	MaxInFlight int        `json:"max_in_flight"`
	Paused      *pauseJSON `json:"paused"`
	CreatedAt   time.Time  `json:"created_at"`
	Created     *bool      `json:"created,omitempty"`
	// Error says why a stored row cannot be used (SeriesInfo.Err); the
	// other fields are then empty.
	Error string `json:"error,omitempty"`
}

// pauseJSON says since when a series is paused, by whom and why.
type pauseJSON struct {
	Since  time.Time `json:"since"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
}

func toPauseJSON(d almanac.SeriesInfo) *pauseJSON {
	if d.PausedAt.IsZero() {
		return nil
	}
	return &pauseJSON{Since: d.PausedAt, By: d.PausedBy, Reason: d.PausedReason}
}

func toSeriesJSON(d almanac.SeriesInfo) seriesJSON {
	if d.Err != nil {
		return seriesJSON{Error: d.Err.Error(), CreatedAt: d.CreatedAt}
	}
	return seriesJSON{
		Name: d.Series.Name(), Interval: d.Series.Interval().String(), TimeZone: d.Series.Location().String(),
		Origin: slot.FormatTime(d.Series.Origin()), Lag: d.Lag.String(), MaxInFlight: d.MaxInFlight, Paused: toPauseJSON(d), CreatedAt: d.CreatedAt,
	}
}

// describePause is the human form of a series' pause, "" when not paused.
func describePause(d almanac.SeriesInfo) string {
	if d.PausedAt.IsZero() {
		return ""
	}
	out := fmt.Sprintf("paused since %s by %s", slot.FormatTime(d.PausedAt.In(d.Series.Location())), input.PrintableName(d.PausedBy))
	if d.PausedReason != "" {
		out += ": " + clip(d.PausedReason)
	}
	return out
}

func (a *app) seriesPauseCommand(pause bool) *cobra.Command {
	var interval, reason string
	verb, short, long := "pause", "Pause a series for every process: nothing more is claimed", `Pause a registered series for the whole fleet: from now on no process claims
its slots (in any mode, expired leases included); slots held now finish and
record their outcomes. The pause, who asked (--actor, default user@host) and
--reason are stored with the series and shown by series list, status and the
coverage page; resume ends it.`
	example := `  almanac series pause billing --interval P1D --reason "upstream API down"`
	if !pause {
		verb, short, long = "resume", "Resume a paused series: its slots are claimed again", `Resume a paused series: processes claim its slots again, and idle workers are
woken at once. The resume and --reason are recorded in the series' history.`
		example = `  almanac series resume billing --interval P1D --reason "upstream API back"`
	}
	cmd := &cobra.Command{
		Use:     verb + " NAME --interval P [--reason TEXT]",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			iv, err := seriesArgs(args[0], interval)
			if err != nil {
				return err
			}
			if reason != "" {
				if err := input.CheckReason(reason); err != nil {
					return usageError(fmt.Errorf("--reason: %w", err))
				}
			}
			c, grid, err := a.openSeries(cmd.Context(), args[0], iv)
			if err != nil {
				return err
			}
			var info almanac.SeriesInfo
			if pause {
				info, err = c.Pause(cmd.Context(), grid, reason)
			} else {
				info, err = c.Resume(cmd.Context(), grid, reason)
			}
			if err != nil {
				return fmt.Errorf("series %s: %w", verb, err)
			}
			if a.json {
				return a.printJSON(toSeriesJSON(info))
			}
			state := describePause(info)
			if state == "" {
				state = "running"
			}
			fmt.Fprintf(a.stdout, "%s %s: %s\n", input.PrintableName(grid.Name()), grid.Interval(), state)
			return nil
		},
	}
	cmd.Flags().StringVar(&interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M (default: the name's only one)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the series (at most 1 KiB)")
	a.registerActor(cmd)
	return cmd
}

func (a *app) seriesAddCommand() *cobra.Command {
	var interval, tz, origin, lag string
	var after []string
	cmd := &cobra.Command{
		Use:   "add NAME --interval P [--tz ZONE] [--origin TIME] [--lag D] [--after UP:INTERVAL]...",
		Short: "Register a series: a name, an ISO-8601 interval, a time zone and an origin",
		Long: `Register a series. Its slots are [origin + n·interval, origin + (n+1)·interval).

--interval  ISO-8601 duration: PT5M, PT1H, P1D, P1W, P1M, P1Y, P1DT12H, ...
--tz        IANA time zone in which calendar parts (days, months) are added (default UTC)
--origin    start of slot 0: RFC 3339 (2026-01-01T00:00:00+01:00) or a local
            date/time in --tz (2026-01-01, 2026-01-01T06:00); default
            2000-01-01T00:00 local, or Monday 2000-01-03 for weekly intervals
--lag       how long after its end a slot becomes due (PT1M or 1m): no worker
            claims it earlier, and reports count it as not due, not missing;
            stored when the series is registered (change it with series set)
--after     an upstream series, NAME:INTERVAL (repeatable): a slot is due only
            once every overlapping upstream slot is complete or skipped, and
            re-opening upstream slots re-opens the overlapping finished ones
            here; replaces the series' upstream list; a cycle is refused

Registering the same series again is a no-op; registering it with another zone
or origin is refused (exit 2), because that would move every slot boundary.`,
		Example: `  almanac series add sensor_report --interval PT5M --lag PT1M
  almanac series add billing --interval P1D --tz Europe/Berlin
  almanac series add payroll --interval P1M --tz America/New_York --origin 2026-01-31
  almanac series add ingest --interval PT1H
  almanac series add report --interval P1D --tz Europe/Berlin --after ingest:PT1H`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			grid, err := parseGrid(args[0], interval, tz, origin)
			if err != nil {
				return err
			}
			var opts almanac.SeriesOptions
			if opts.Lag, err = parseLag(lag); err != nil {
				return err
			}
			ups, err := parseAfter(after)
			if err != nil {
				return err
			}
			c, err := a.connectMigrated(cmd.Context())
			if err != nil {
				return err
			}
			if opts.After, err = lookupAfter(cmd.Context(), c, ups); err != nil {
				return err
			}
			def, created, err := c.AddSeries(cmd.Context(), grid)
			if errors.Is(err, almanac.ErrSeriesConflict) {
				return usageError(err)
			}
			if err == nil && (created && opts.Lag != 0 || len(opts.After) > 0) {
				if !created {
					opts.Lag, opts.MaxInFlight = def.Lag, def.MaxInFlight
				}
				def, err = c.SetSeries(cmd.Context(), grid, opts)
				if errors.Is(err, almanac.ErrInvalid) {
					return usageError(err)
				}
			}
			if err != nil {
				return fmt.Errorf("series add: %w", err)
			}
			if a.json {
				out := toSeriesJSON(def)
				out.Created = &created
				return a.printJSON(out)
			}
			verb := "registered"
			if !created {
				verb = "already registered"
			}
			g := def.Series
			fmt.Fprintf(a.stdout, "%s %s %s (%s, origin %s)\n", verb, input.PrintableName(g.Name()), g.Interval(), g.Location(), slot.FormatTime(g.Origin()))
			return nil
		},
	}
	cmd.Flags().StringVar(&interval, "interval", "", "ISO-8601 interval of the slots, e.g. PT5M, P1D, P1M (required)")
	cmd.Flags().StringVar(&tz, "tz", "UTC", "IANA time zone of the series")
	cmd.Flags().StringVar(&origin, "origin", "", "start of slot 0 (default 2000-01-01T00:00 local; Monday 2000-01-03 for weeks)")
	cmd.Flags().StringVar(&lag, "lag", "", "how long after its end a slot becomes due, e.g. PT1M or 1m (default none)")
	cmd.Flags().StringArrayVar(&after, "after", nil, "an upstream series NAME:INTERVAL, e.g. ingest:PT1H (repeatable)")
	return cmd
}

// upstream is a --after value: a series name and interval.
type upstream struct {
	name     string
	interval slot.Interval
}

// parseAfter reads --after values, NAME:INTERVAL each.
func parseAfter(values []string) ([]upstream, error) {
	var out []upstream
	for _, v := range values {
		i := strings.LastIndexByte(v, ':')
		if i <= 0 {
			return nil, usagef("--after %q: expected NAME:INTERVAL, e.g. ingest:PT1H", v)
		}
		if err := input.CheckName(v[:i]); err != nil {
			return nil, usageError(fmt.Errorf("--after: %w", err))
		}
		iv, err := slot.ParseInterval(v[i+1:])
		if err != nil {
			return nil, usageError(fmt.Errorf("--after %q: %w", v, err))
		}
		out = append(out, upstream{v[:i], iv})
	}
	return out, nil
}

// lookupAfter loads the upstream series; one not registered is bad input.
func lookupAfter(ctx context.Context, c *almanac.Client, ups []upstream) ([]almanac.Series, error) {
	var out []almanac.Series
	for _, u := range ups {
		info, err := c.LookupSeries(ctx, u.name, u.interval.String())
		if errors.Is(err, almanac.ErrUnknownSeries) {
			return nil, usageError(fmt.Errorf("--after: %w", err))
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info.Series)
	}
	return out, nil
}

func (a *app) seriesDepsCommand() *cobra.Command {
	var interval string
	cmd := &cobra.Command{
		Use:   "deps NAME --interval P",
		Short: "Show the series a series depends on, and those that depend on it",
		Long: `Show the upstream series of a series (set with series add --after): its slots
are due only once the overlapping upstream slots are complete or skipped, and a
re-open upstream re-opens them. Also shows the series that depend on it.`,
		Example: `  almanac series deps sensor_report --interval PT5M`,
		Args:    exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			iv, err := seriesArgs(args[0], interval)
			if err != nil {
				return err
			}
			c, grid, err := a.openSeries(cmd.Context(), args[0], iv)
			if err != nil {
				return err
			}
			infos, err := c.ListSeries(cmd.Context())
			if err != nil {
				return fmt.Errorf("series deps: %w", err)
			}
			out := depsJSON{Name: grid.Name(), Interval: grid.Interval().String(), After: []seriesJSON{}, Before: []seriesJSON{}}
			same := func(s almanac.Series) bool { return s.Name() == grid.Name() && s.Interval() == grid.Interval() }
			var after []almanac.Series
			for _, d := range infos {
				if d.Err == nil && same(d.Series) {
					after = d.After
				}
			}
			// ListSeries orders by name and interval: so are both lists.
			for _, d := range infos {
				if d.Err != nil {
					continue
				}
				if slices.ContainsFunc(after, func(s almanac.Series) bool {
					return s.Name() == d.Series.Name() && s.Interval() == d.Series.Interval()
				}) {
					out.After = append(out.After, toSeriesJSON(d))
				}
				if slices.ContainsFunc(d.After, same) {
					out.Before = append(out.Before, toSeriesJSON(d))
				}
			}
			if a.json {
				return a.printJSON(out)
			}
			fmt.Fprintf(a.stdout, "%s %s\n", input.PrintableName(grid.Name()), grid.Interval())
			for _, d := range out.After {
				fmt.Fprintf(a.stdout, "  after   %s:%s (%s)\n", input.PrintableName(d.Name), d.Interval, d.TimeZone)
			}
			for _, d := range out.Before {
				fmt.Fprintf(a.stdout, "  before  %s:%s (%s)\n", input.PrintableName(d.Name), d.Interval, d.TimeZone)
			}
			if len(out.After)+len(out.Before) == 0 {
				fmt.Fprintln(a.stdout, "  no dependencies")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M (default: the name's only one)")
	return cmd
}

// depsJSON is the machine form of series deps.
type depsJSON struct {
	Name     string       `json:"name"`
	Interval string       `json:"interval"`
	After    []seriesJSON `json:"after"`
	Before   []seriesJSON `json:"before"`
}

// parseLag reads --lag: empty for none, else a duration of 0 or more.
func parseLag(text string) (time.Duration, error) {
	if text == "" {
		return 0, nil
	}
	d, err := parseDuration("lag", text)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, usagef("--lag %q is negative; expected 0 or more, e.g. PT1M", text)
	}
	return d, nil
}

func (a *app) seriesSetCommand() *cobra.Command {
	var interval, lag string
	var maxInFlight int
	cmd := &cobra.Command{
		Use:   "set NAME --interval P [--lag D] [--max-in-flight N]",
		Short: "Change the controls stored with a series, which every process obeys",
		Long: `Change the controls of a registered series. Only the flags given change;
every process working on the series obeys the new values from its next claim.

--lag  how long after its end a slot becomes due (PT1M or 1m; 0 for none):
       no worker claims it earlier (a job's own longer lag still applies),
       and gaps, status and the page count a slot without a row that is not
       due yet as not due, never as missing
--max-in-flight  at most N slots of the series held at once, by every process
       and mode together (0 for no cap), enforced by the database: a
       rate-limited downstream sees no more than N at a time`,
		Example: `  almanac series set sensor_report --interval PT5M --lag PT2M
  almanac series set billing --interval P1D --lag 0 --max-in-flight 4`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			iv, err := seriesArgs(args[0], interval)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("lag") && !cmd.Flags().Changed("max-in-flight") {
				return usagef("nothing to set: give --lag or --max-in-flight")
			}
			if maxInFlight < 0 {
				return usagef("--max-in-flight %d is negative; expected 0 (no cap) or more", maxInFlight)
			}
			lagValue, err := parseLag(lag)
			if err != nil {
				return err
			}
			c, grid, err := a.openSeries(cmd.Context(), args[0], iv)
			if err != nil {
				return err
			}
			info, err := c.LookupSeries(cmd.Context(), grid.Name(), grid.Interval().String())
			if err != nil {
				return fmt.Errorf("series set: %w", err)
			}
			opts := almanac.SeriesOptions{Lag: info.Lag, MaxInFlight: info.MaxInFlight, After: info.After}
			if cmd.Flags().Changed("lag") {
				opts.Lag = lagValue
			}
			if cmd.Flags().Changed("max-in-flight") {
				opts.MaxInFlight = maxInFlight
			}
			def, err := c.SetSeries(cmd.Context(), info.Series, opts)
			if err != nil {
				return fmt.Errorf("series set: %w", err)
			}
			if a.json {
				return a.printJSON(toSeriesJSON(def))
			}
			limit := "none"
			if def.MaxInFlight > 0 {
				limit = fmt.Sprint(def.MaxInFlight)
			}
			fmt.Fprintf(a.stdout, "set %s %s: lag %s, max in flight %s\n", input.PrintableName(def.Series.Name()), def.Series.Interval(), def.Lag, limit)
			return nil
		},
	}
	cmd.Flags().StringVar(&interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M (default: the name's only one)")
	cmd.Flags().StringVar(&lag, "lag", "", "how long after its end a slot becomes due, e.g. PT1M or 1m; 0 for none")
	cmd.Flags().IntVar(&maxInFlight, "max-in-flight", 0, "at most N slots held at once across the fleet; 0 for no cap")
	return cmd
}

// parseGrid validates a series given on the command line. Every error is a
// usage error that names the bad value.
func parseGrid(name, interval, tz, origin string) (almanac.Series, error) {
	if err := input.CheckName(name); err != nil {
		return almanac.Series{}, usageError(err)
	}
	if interval == "" {
		return almanac.Series{}, usagef("--interval is required, e.g. --interval PT5M")
	}
	iv, err := slot.ParseInterval(interval)
	if err != nil {
		return almanac.Series{}, usageError(fmt.Errorf("--interval: %w", err))
	}
	loc, err := slot.LoadZone(tz)
	if err != nil {
		return almanac.Series{}, usageError(fmt.Errorf("--tz: %w", err))
	}
	var o time.Time
	if origin != "" {
		if o, err = slot.ParseTime(origin, loc); err != nil {
			return almanac.Series{}, usageError(fmt.Errorf("--origin: %w", err))
		}
	}
	grid, err := slot.NewSeries(name, iv, loc, o)
	if err != nil {
		return almanac.Series{}, usageError(err)
	}
	return grid, nil
}

func (a *app) seriesListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List registered series",
		Long: `List registered series. A stored row almanac cannot use (plain SQL wrote a
name with a control character, an interval such as P0D, an unknown zone) is
flagged: a warning line on stderr, or an entry with an "error" field in --json;
the other series are listed and the exit code is 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connectMigrated(cmd.Context())
			if err != nil {
				return err
			}
			defs, err := c.ListSeries(cmd.Context())
			if err != nil {
				return fmt.Errorf("series list: %w", err)
			}
			if a.json {
				out := make([]seriesJSON, len(defs))
				for i, d := range defs {
					out[i] = toSeriesJSON(d)
				}
				return a.printJSON(out)
			}
			if len(defs) == 0 {
				// Say where it looked: an empty list is often the wrong database or schema.
				_, err := fmt.Fprintf(a.stdout, "no series in schema %q in %s; register one with almanac series add NAME --interval P\n", a.schema, a.target)
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tINTERVAL\tTIME ZONE\tORIGIN\tSTATE")
			for _, d := range defs {
				if d.Err != nil {
					fmt.Fprintln(a.stderr, "almanac: warning: "+shown(d.Err.Error()))
					continue
				}
				state := describePause(d)
				if state == "" {
					state = "running"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", input.PrintableName(d.Series.Name()), d.Series.Interval(), d.Series.Location(),
					slot.FormatTime(d.Series.Origin()), state)
			}
			return tw.Flush()
		},
	}
}

// seriesArgs checks a registered series' name and its --interval, which may
// be empty: openSeries then takes the name's only interval. Every error is a
// usage error naming the bad value.
func seriesArgs(name, interval string) (slot.Interval, error) {
	if err := input.CheckName(name); err != nil {
		return slot.Interval{}, usageError(err)
	}
	if interval == "" {
		return slot.Interval{}, nil
	}
	iv, err := slot.ParseInterval(interval)
	if err != nil {
		return slot.Interval{}, usageError(fmt.Errorf("--interval: %w", err))
	}
	return iv, nil
}
