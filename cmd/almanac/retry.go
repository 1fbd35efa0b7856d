package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/defaults"
)

type retryResult struct {
	rangeJSON
	DryRun   bool  `json:"dry_run"`
	Retried  int64 `json:"retried"`
	Unparked int64 `json:"unparked"`
	// AlreadyDue counts the failed slots of the range that retry leaves
	// alone because they are due already: any running worker retries them.
	AlreadyDue int64      `json:"already_due"`
	Held       []heldJSON `json:"held"`
}

func (a *app) retryCommand() *cobra.Command {
	var rf rangeFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "retry NAME --interval P --from T --to T [--actor A] [--dry-run]",
		Short: "Run failed slots of a range now: clear their backoff and parking",
		Long: `Make the slots of [--from, --to) that wait for a retry (in backoff) or gave up
(parked) acquirable now, and wake idle workers. Parked slots also get a fresh
set of attempts. Locked slots are left alone and listed. Each slot retried is
recorded in its history with --actor (see history).

` + rangeHelp,
		Example: `  almanac retry sensor_report --interval PT5M --from 2026-03-01 --to 2026-03-02`,
		Args:    exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, grid, from, to, err := a.openRange(ctx, &rf, args[0])
			if err != nil {
				return err
			}
			// The failed slots already due are not retry's to change: count
			// them first, so the report says why they are still there.
			failed, _, err := c.Failures(ctx, almanac.FailuresOptions{Name: grid.Name(), Interval: grid.Interval().String(), From: from, To: to,
				Limit: defaults.FailuresLimit})
			if err != nil {
				return fmt.Errorf("retry: %w", err)
			}
			var due []almanac.Failure
			for _, f := range failed {
				if isDue(f, a.now()) {
					due = append(due, f)
				}
			}
			bar, clear := a.progressBar("retry")
			res, err := c.Retry(ctx, grid, from, to, almanac.WriteOptions{DryRun: dryRun, Progress: bar})
			clear()
			if err != nil {
				return fmt.Errorf("retry: %w", err)
			}
			if a.json {
				return a.printJSON(retryResult{toRangeJSON(grid, from, to), dryRun, res.Changed, res.Unparked, int64(len(due)), toHeldJSON(grid, res.Held)})
			}
			verb := "retrying"
			if dryRun {
				verb = "dry run: would retry"
			}
			fmt.Fprintf(a.stdout, "%s %s of %s now (%s parked)\n", verb, nouns(res.Changed, "slot", "slots"), describeRange(grid, from, to), num(res.Unparked)+" "+plural(res.Unparked, "was", "were"))
			if len(due) > 0 {
				fmt.Fprintf(a.stdout, "left alone: %s\n", failuresHint(due, a.now()))
			}
			return printHeld(a.stdout, grid, res.Held)
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be retried; change nothing")
	a.registerActor(cmd)
	return cmd
}
