package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

type skipResult struct {
	rangeJSON
	DryRun         bool       `json:"dry_run"`
	Skipped        int64      `json:"skipped"`
	Inserted       int64      `json:"inserted"`
	Complete       int64      `json:"complete"`
	AlreadySkipped int64      `json:"already_skipped"`
	Held           []heldJSON `json:"held"`
}

func (a *app) skipCommand() *cobra.Command {
	var rf rangeFlags
	var slotText, reason string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "skip NAME --interval P (--slot SLOT | --from T --to T) --reason R [--actor A] [--dry-run]",
		Short: "Mark one slot or a range SKIP: nothing to process there",
		Long: `Mark the slot --slot, or the slots of [--from, --to), SKIP with a reason (a
holiday, a known outage). Missing slots are inserted as SKIP, so the hole stays
visible. COMPLETE slots are left alone and counted; slots in flight are left
alone and listed. Each slot skipped is recorded in its history with the reason
and --actor (see history).

--slot takes a slot's text: 2026-03-29T00:00:00+01:00/P1D (start with its
offset, then the interval or the end).

` + rangeHelp,
		Example: `  almanac skip billing --interval P1D --slot 2026-12-25T00:00:00+01:00/P1D --reason holiday
  almanac skip sensor_report --interval PT5M --from 2026-03-01T02:00:00Z --to 2026-03-01T03:00:00Z --reason "sensor outage"`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if (slotText == "") == (rf.from == "" && rf.to == "") {
				return usagef("give either --slot or --from and --to")
			}
			iv, err := rf.check(args[0], slotText == "")
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required, e.g. --reason holiday")
			}
			if err := input.CheckReason(reason); err != nil {
				return usageError(fmt.Errorf("--reason: %w", err))
			}
			if slotText != "" {
				if err := checkSlotSyntax(slotText); err != nil {
					return err
				}
			}
			c, grid, err := a.openSeries(ctx, args[0], iv)
			if err != nil {
				return err
			}
			var from, to time.Time
			if slotText != "" {
				sl, err := grid.ParseSlot(slotText)
				if err != nil {
					return usageError(fmt.Errorf("--slot: %w", err))
				}
				from, to = sl.Start, sl.End
			} else if from, to, err = rf.resolve(grid); err != nil {
				return err
			}
			bar, clear := a.progressBar("skip")
			res, err := c.Skip(ctx, grid, from, to, almanac.WriteOptions{Reason: reason, DryRun: dryRun, Progress: bar})
			clear()
			if err != nil {
				return fmt.Errorf("skip: %w", err)
			}
			if a.json {
				return a.printJSON(skipResult{toRangeJSON(grid, from, to), dryRun, res.Changed - res.Inserted, res.Inserted,
					res.Complete, res.AlreadySkipped, toHeldJSON(grid, res.Held)})
			}
			skipped, inserted := "skipped", "inserted"
			if dryRun {
				skipped, inserted = "dry run: would skip", "would insert"
			}
			fmt.Fprintf(a.stdout, "%s %d slot(s) of %s and %s %d missing one(s) as SKIP; left alone: %d complete, %d already skipped\n",
				skipped, res.Changed-res.Inserted, describeRange(grid, from, to), inserted, res.Inserted, res.Complete, res.AlreadySkipped)
			return printHeld(a.stdout, grid, res.Held)
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&slotText, "slot", "", "the slot to skip, e.g. 2026-12-25T00:00:00+01:00/P1D")
	cmd.Flags().StringVar(&reason, "reason", "", "why, stored in the slots' message (required; at most 1 KiB of UTF-8, no control characters but tab and newline)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be skipped; change nothing")
	a.registerActor(cmd)
	return cmd
}

// checkSlotSyntax checks a slot text before the series' grid is known:
// "<start>/<interval>" or "<start>/<end>", times with offsets.
func checkSlotSyntax(text string) error {
	start, rest, ok := strings.Cut(text, "/")
	if !ok {
		return usagef("--slot %q: expected <start>/<interval> such as 2026-03-01T00:00:00Z/PT5M", text)
	}
	if _, err := slot.ParseTime(start, nil); err != nil {
		return usageError(fmt.Errorf("--slot %q: %w", text, err))
	}
	var err error
	if strings.HasPrefix(rest, "P") {
		_, err = slot.ParseInterval(rest)
	} else {
		_, err = slot.ParseTime(rest, nil)
	}
	if err != nil {
		return usageError(fmt.Errorf("--slot %q: %w", text, err))
	}
	return nil
}
