package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/slot"
)

type compactResult struct {
	DryRun    bool   `json:"dry_run"`
	Before    string `json:"before"`
	Series    int    `json:"series"`
	Compacted int64  `json:"compacted"`
	Ranges    int64  `json:"ranges"`
}

func (a *app) compactCommand() *cobra.Command {
	var interval, before, olderThan string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "compact [NAME --interval P] (--before T | --older-than D) [--dry-run]",
		Short: "Bound the slot table: delete old finished slots into compacted ranges",
		Long: `Delete the rows of the finished slots (COMPLETE and SKIP) that end at or before
--before (or more than --older-than ago, by the database's clock), of one series or
of every series, and record them as compacted ranges: about one row per series
and run of one state, however many years. Run it on a retention (daily from
cron, say) to keep the slot table's size flat.

Compacted slots stay finished: gaps and status count them as complete or
skipped as they were, materialize never creates them again, so no worker runs
them again; reopen brings them back (as a new generation). What is lost is
their per-slot detail (attempts, data, messages); their history stays until
history --prune removes it. Open and missing slots are never compacted.`,
		Example: `  almanac compact --older-than 90d
  almanac compact sensor_report --interval PT5M --before 2026-01-01 --dry-run`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("compact takes at most one series NAME, got %d; see %q", len(args), cmd.CommandPath()+" --help")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if (before == "") == (olderThan == "") {
				return usagef("give one of --before T and --older-than D, e.g. --older-than 90d")
			}
			var age time.Duration
			if olderThan != "" {
				var err error
				if age, err = parseAge(olderThan); err != nil {
					return err
				}
			} else if err := slot.CheckTime(before); err != nil {
				return usageError(fmt.Errorf("--before: %w", err))
			}
			if len(args) == 0 && interval != "" {
				return usagef("--interval %q needs a series NAME; without one, every series is compacted", interval)
			}
			var series []almanac.Series
			var at time.Time
			loc := time.UTC
			var c *almanac.Client
			if len(args) == 1 {
				rf := rangeFlags{interval: interval, maxSlots: defaultMaxSlots}
				iv, err := rf.check(args[0], false)
				if err != nil {
					return err
				}
				var s almanac.Series
				if c, s, err = a.openSeries(ctx, args[0], iv); err != nil {
					return err
				}
				series, loc = []almanac.Series{s}, s.Location()
			} else {
				var err error
				if c, err = a.connectMigrated(ctx); err != nil {
					return err
				}
			}
			if olderThan != "" {
				// By the database's clock, as workers' claims and leases
				// are: a host whose clock is off would compact by its own
				// idea of now.
				var now time.Time
				if err := a.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
					return fmt.Errorf("read the database clock: %w", err)
				}
				at = now.Add(-age)
			} else {
				var err error
				if at, err = slot.ParseTime(before, loc); err != nil {
					return usageError(fmt.Errorf("--before: %w", err))
				}
			}
			bar, clear := a.progressBar("compact")
			res, err := c.Compact(ctx, at, almanac.WriteOptions{DryRun: dryRun, Progress: bar}, series...)
			clear()
			if err != nil {
				return err
			}
			n := len(series)
			if n == 0 {
				all, err := c.ListSeries(ctx)
				if err != nil {
					return err
				}
				for _, info := range all {
					if info.Err == nil { // Compact passes unusable rows by
						n++
					}
				}
			}
			by := at.In(loc).Format(time.RFC3339)
			if a.json {
				return a.printJSON(compactResult{DryRun: dryRun, Before: by, Series: n, Compacted: res.Changed, Ranges: res.Ranges})
			}
			if dryRun {
				fmt.Fprintf(a.stdout, "dry run: would compact %d finished slot(s) of %d series ending by %s\n", res.Changed, n, by)
				return nil
			}
			fmt.Fprintf(a.stdout, "compacted %d finished slot(s) of %d series ending by %s; %d compacted range(s)\n", res.Changed, n, by, res.Ranges)
			return nil
		},
	}
	cmd.Flags().StringVar(&interval, "interval", "", "ISO-8601 interval of the series NAME, e.g. PT5M")
	cmd.Flags().StringVar(&before, "before", "", "compact the slots ending at or before this time: RFC 3339, or a local date/time in the series' zone (UTC for every series)")
	cmd.Flags().StringVar(&olderThan, "older-than", "", "compact the slots ending more than this long ago: days (90d), or a duration (PT2160H, 36h)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count the finished slots that would be compacted; change nothing")
	return cmd
}

// parseAge reads --older-than: a whole number of days (90d), or what
// parseDuration reads.
func parseAge(text string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(text, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100_000 {
			return 0, usagef("--older-than %q: expected a number of days such as 90d, or a duration such as PT36H", text)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return parseDuration("older-than", text)
}
