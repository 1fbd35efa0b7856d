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

--slot takes a slot's text, 2026-03-29T00:00:00+01:00/P1D (start with its
offset, then the interval or the end), or the slot's start as any other time
is given: 2026-12-25 is the slot starting at midnight in the series' zone.

` + rangeHelp,
		Example: `  almanac skip billing --interval P1D --slot 2026-12-25 --reason holiday
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
				sl, err := slotAt(grid, slotText)
				if err != nil {
					return err
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
			fmt.Fprintf(a.stdout, "%s %s of %s and %s %s as SKIP; left alone: %s complete, %s already skipped\n",
				skipped, nouns(res.Changed-res.Inserted, "slot", "slots"), describeRange(grid, from, to), inserted, nouns(res.Inserted, "missing slot", "missing slots"),
				num(res.Complete), num(res.AlreadySkipped))
			return printHeld(a.stdout, grid, res.Held)
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&slotText, "slot", "", "the slot to skip, e.g. 2026-12-25T00:00:00+01:00/P1D, or its start, e.g. 2026-12-25 (in the series' zone)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, stored in the slots' message (required; at most 1 KiB of UTF-8, no control characters but tab and newline)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be skipped; change nothing")
	a.registerActor(cmd)
	return cmd
}

// slotAt reads --slot in the series' grid: a slot's text, or the start of
// a slot as a time (RFC 3339, or a local date or date and time in the
// series' zone, as --from reads it).
func slotAt(grid almanac.Series, text string) (slot.Slot, error) {
	if strings.Contains(text, "/") {
		sl, err := grid.ParseSlot(text)
		if err != nil {
			return sl, usageError(fmt.Errorf("--slot: %w", err))
		}
		return sl, nil
	}
	t, err := slot.ParseTime(text, grid.Location())
	if err != nil {
		return slot.Slot{}, usageError(fmt.Errorf("--slot: %w", err))
	}
	sl, err := grid.Floor(t)
	if err != nil {
		return sl, usageError(fmt.Errorf("--slot: %w", err))
	}
	if !sl.Start.Equal(t) {
		return sl, usagef("--slot %q is not the start of a %s slot of %s; the slot holding it is %s",
			text, grid.Interval(), input.PrintableName(grid.Name()), sl)
	}
	return sl, nil
}

// checkSlotSyntax checks --slot before the series' grid is known:
// "<start>/<interval>", "<start>/<end>" with offsets, or a time (checked
// as far as it can be without the series' zone).
func checkSlotSyntax(text string) error {
	start, rest, ok := strings.Cut(text, "/")
	if !ok {
		if err := slot.CheckTime(text); err != nil {
			return usageError(fmt.Errorf("--slot %q: %w; expected a slot such as 2026-03-01T00:00:00Z/PT5M or its start", text, err))
		}
		return nil
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
