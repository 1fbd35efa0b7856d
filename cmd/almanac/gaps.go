package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

type gapJSON struct {
	Start string `json:"start"`
	End   string `json:"end"`
	Slots int64  `json:"slots"`
}

// notCompleteJSON counts the stored slots that are not COMPLETE, by state.
type notCompleteJSON struct {
	Available int64 `json:"available"`
	Backoff   int64 `json:"backoff"`
	Parked    int64 `json:"parked"`
	Acquired  int64 `json:"acquired"`
	Skip      int64 `json:"skip"`
}

type gapsResult struct {
	rangeJSON
	Slots       int64           `json:"slots"`
	Missing     int64           `json:"missing"`
	NotDue      int64           `json:"not_due"`
	Gaps        []gapJSON       `json:"gaps"`
	NotComplete notCompleteJSON `json:"not_complete"`
}

func (a *app) gapsCommand() *cobra.Command {
	var rf rangeFlags
	var failOnGaps bool
	cmd := &cobra.Command{
		Use:   "gaps NAME --interval P --from T --to T [--fail-on-gaps]",
		Short: "List the missing slots of a range, as maximal runs, and the slots not complete",
		Long: `List the slots of [--from, --to) that have no row, as maximal runs (a gap of
24 PT5M slots is one line), then count the slots that exist but are not
COMPLETE, by state. Only due slots can be missing: a slot without a row whose
end plus the series' lag (see series set --lag) has not passed on the database
clock is counted as not due yet. With --fail-on-gaps the command exits 1 when
a due slot is missing, for monitoring; a range in the future never fails.

` + rangeHelp,
		Example: `  almanac gaps sensor_report --interval PT5M --from 2026-03-01 --to 2026-03-02
  almanac gaps billing --interval P1D --from 2026-01-01 --to 2027-01-01 --fail-on-gaps --json`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, grid, from, to, err := a.openRange(ctx, &rf, args[0])
			if err != nil {
				return err
			}
			res := gapsResult{rangeJSON: toRangeJSON(grid, from, to), Gaps: []gapJSON{}}
			res.Slots, _ = grid.Count(from, to)
			gaps, err := c.Gaps(ctx, grid, from, to)
			if err != nil {
				return fmt.Errorf("gaps: %w", err)
			}
			for _, g := range gaps {
				res.Gaps = append(res.Gaps, gapJSON{formatIn(grid, g.Start), formatIn(grid, g.End), g.Slots})
				res.Missing += g.Slots
			}
			n, err := c.Status(ctx, grid, from, to)
			if err != nil {
				return fmt.Errorf("gaps: %w", err)
			}
			res.NotComplete = notCompleteJSON{n.Available, n.Backoff, n.Parked, n.Acquired, n.Skip}
			res.NotDue = n.NotDue
			if err := a.printGaps(res, describeRange(grid, from, to)); err != nil {
				return err
			}
			if failOnGaps && res.Missing > 0 {
				return problemError(fmt.Errorf("%s missing in %s in %s", nouns(res.Missing, "slot", "slots"), nouns(len(res.Gaps), "gap", "gaps"), describeRange(grid, from, to)))
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&failOnGaps, "fail-on-gaps", false, "exit 1 when a slot is missing")
	return cmd
}

func (a *app) printGaps(res gapsResult, what string) error {
	if a.json {
		return a.printJSON(res)
	}
	switch {
	case len(res.Gaps) == 0 && res.NotDue > 0:
		fmt.Fprintf(a.stdout, "no gaps: %s of %s %s; %s not due yet\n", plural(res.Slots-res.NotDue, "the 1 due slot", "all "+nouns(res.Slots-res.NotDue, "due slot", "due slots")), what, plural(res.Slots-res.NotDue, "exists", "exist"), num(res.NotDue))
	case len(res.Gaps) == 0:
		fmt.Fprintf(a.stdout, "no gaps: %s of %s %s\n", plural(res.Slots, "the 1 slot", "all "+nouns(res.Slots, "slot", "slots")), what, plural(res.Slots, "exists", "exist"))
	default:
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GAP START\tGAP END\tSLOTS")
		for _, g := range res.Gaps {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Start, g.End, num(g.Slots))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s: %s of %s of %s missing\n", nouns(len(res.Gaps), "gap", "gaps"), num(res.Missing), nouns(res.Slots, "slot", "slots"), what)
		if res.NotDue > 0 {
			fmt.Fprintf(a.stdout, "not due yet: %s\n", nouns(res.NotDue, "slot", "slots"))
		}
	}
	nc := res.NotComplete
	fmt.Fprintf(a.stdout, "not complete: %s available, %s in backoff, %s parked, %s acquired, %s skipped\n",
		num(nc.Available), num(nc.Backoff), num(nc.Parked), num(nc.Acquired), num(nc.Skip))
	return nil
}
