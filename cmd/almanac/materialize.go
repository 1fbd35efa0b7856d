package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
)

type materializeResult struct {
	rangeJSON
	Slots    int64 `json:"slots"`
	Inserted int64 `json:"inserted"`
	Existing int64 `json:"existing"`
	DryRun   bool  `json:"dry_run"`
}

func (a *app) materializeCommand() *cobra.Command {
	var rf rangeFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "materialize NAME --interval P --from T --to T [--dry-run]",
		Short: "Insert the missing slots of a range as AVAILABLE",
		Long: `Insert every missing slot of [--from, --to) as AVAILABLE, so workers process it.
Existing slots are never changed. Safe to repeat and to run from several
processes at once; each slot is inserted once.

` + rangeHelp,
		Example: `  almanac materialize sensor_report --interval PT5M --from 2026-03-01 --to 2026-04-01
  almanac materialize billing --interval P1D --from 2020-01-01 --to 2026-01-01 --dry-run`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, grid, from, to, err := a.openRange(ctx, &rf, args[0])
			if err != nil {
				return err
			}
			bar, clear := a.progressBar("materialize")
			res, err := c.Materialize(ctx, grid, from, to, almanac.WriteOptions{DryRun: dryRun, Progress: bar})
			clear()
			if err != nil {
				return fmt.Errorf("materialize: %w", err)
			}
			out := materializeResult{toRangeJSON(grid, from, to), res.Slots, res.Inserted, res.Slots - res.Inserted, dryRun}
			if a.json {
				return a.printJSON(out)
			}
			verb := "inserted"
			if dryRun {
				verb = "dry run: would insert"
			}
			fmt.Fprintf(a.stdout, "%s %s of %s of %s; %s\n", verb, num(out.Inserted), nouns(out.Slots, "slot", "slots"), describeRange(grid, from, to), num(out.Existing)+" "+plural(out.Existing, "existed", "existed"))
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be inserted; write nothing")
	return cmd
}
