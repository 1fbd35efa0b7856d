package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
)

type reopenResult struct {
	rangeJSON
	DryRun   bool       `json:"dry_run"`
	Reopened int64      `json:"reopened"`
	Held     []heldJSON `json:"held"`
}

func (a *app) reopenCommand() *cobra.Command {
	var rf rangeFlags
	var reason, states string
	var parked, dryRun bool
	cmd := &cobra.Command{
		Use:   "reopen NAME --interval P --from T --to T [--reason R] [--states S] [--parked] [--actor A] [--dry-run]",
		Short: "Backfill: make the finished slots of a range AVAILABLE again",
		Long: `Make the COMPLETE and SKIP slots of [--from, --to) AVAILABLE again, with the
reason in their message, so workers redo them (late data arrived). Each
becomes a new computation: its generation grows by one (ALMANAC_GENERATION,
ALMANAC_COMPUTATION_KEY) and its attempts start again at 1. The re-open is
recorded in each slot's history with the reason and --actor (see history).
Idle workers are woken at once. Missing slots are not created: see
materialize.

Slots in flight (acquired under a lease, or locked by a locked-mode worker)
are left alone and listed, and the command then exits 1 so that scripts
notice: re-open them once they finish.

` + rangeHelp,
		Example: `  almanac reopen billing --interval P1D --from 2026-03-10 --to 2026-03-11 --reason "late invoices"
  almanac reopen sensor_report --interval PT5M --from 2026-03-01 --to 2026-03-02 --states SKIP --parked --dry-run`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			which, err := parseStates(states)
			if err != nil {
				return err
			}
			if err := input.CheckReason(reason); err != nil {
				return usageError(fmt.Errorf("--reason: %w", err))
			}
			c, grid, from, to, err := a.openRange(ctx, &rf, args[0])
			if err != nil {
				return err
			}
			bar, clear := a.progressBar("reopen")
			res, err := c.Reopen(ctx, grid, from, to, almanac.WriteOptions{Reason: reason, States: which, Parked: parked, DryRun: dryRun, Progress: bar})
			clear()
			if err != nil {
				return fmt.Errorf("reopen: %w", err)
			}
			if a.json {
				err = a.printJSON(reopenResult{toRangeJSON(grid, from, to), dryRun, res.Changed, toHeldJSON(grid, res.Held)})
			} else {
				verb := "reopened"
				if dryRun {
					verb = "dry run: would reopen"
				}
				fmt.Fprintf(a.stdout, "%s %s of %s\n", verb, nouns(res.Changed, "slot", "slots"), describeRange(grid, from, to))
				err = printHeld(a.stdout, grid, res.Held)
			}
			if err == nil && len(res.Held) > 0 {
				err = problemError(fmt.Errorf("reopen: left %s in flight alone; reopen %s once %s", nouns(len(res.Held), "slot", "slots"), plural(len(res.Held), "it", "them"), plural(len(res.Held), "it finishes", "they finish")))
			}
			return err
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&reason, "reason", defaults.ReopenReason, "why, stored in the slots' message (at most 1 KiB of UTF-8, no control characters but tab and newline)")
	cmd.Flags().StringVar(&states, "states", "COMPLETE,SKIP", "which finished states to reopen: COMPLETE, SKIP or both")
	cmd.Flags().BoolVar(&parked, "parked", false, "also reopen parked slots (they gave up after their maximum attempts)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be reopened; change nothing")
	a.registerActor(cmd)
	return cmd
}
