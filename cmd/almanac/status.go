package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
)

type statusResult struct {
	Name            string     `json:"name"`
	Interval        string     `json:"interval"`
	TimeZone        string     `json:"time_zone"`
	Paused          *pauseJSON `json:"paused"`
	From            *string    `json:"from"`
	To              *string    `json:"to"`
	Slots           int64      `json:"slots"`
	Complete        int64      `json:"complete"`
	Skip            int64      `json:"skip"`
	Available       int64      `json:"available"`
	WaitingUpstream int64      `json:"waiting_upstream"`
	Backoff         int64      `json:"backoff"`
	Parked          int64      `json:"parked"`
	Acquired        int64      `json:"acquired"`
	LeaseExpired    int64      `json:"lease_expired"`
	Missing         int64      `json:"missing"`
	NotDue          int64      `json:"not_due"`
	Due             *string    `json:"due"`
	Gaps            int64      `json:"gaps"`
	CoveredPercent  float64    `json:"covered_percent"`
	FirstMissing    *string    `json:"first_missing"`
	OldestOpen      *string    `json:"oldest_open"`
	LastCompleted   *string    `json:"last_completed"`
	LastNote        *noteJSON  `json:"last_note"`
	// WaitingOn is what the first slots waiting for upstream wait on
	// (coverage.Counts.WaitingOn: at most 20 entries); waiting_upstream
	// counts those slots.
	WaitingOn []waitingOnJSON `json:"waiting_on"`
}

// waitingOnJSON is an upstream slot, or a part of an upstream's range
// without a row (status MISSING), that a slot of the series waits for.
type waitingOnJSON struct {
	Waiting  string  `json:"waiting"`
	Series   string  `json:"series"`
	Interval string  `json:"interval"`
	From     string  `json:"from"`
	To       string  `json:"to"`
	Status   string  `json:"status"`
	Parked   bool    `json:"parked"`
	Message  string  `json:"message"`
	At       *string `json:"at"`
}

// noteJSON is the last message written on an open slot.
type noteJSON struct {
	Slot    string `json:"slot"`
	Status  string `json:"status"`
	Parked  bool   `json:"parked"`
	Message string `json:"message"`
	At      string `json:"at"`
}

func toStatusResult(grid almanac.Series, status almanac.Status, stored bool) statusResult {
	out := statusResult{
		Name: grid.Name(), Interval: grid.Interval().String(), TimeZone: grid.Location().String(),
		Slots: status.Slots, Complete: status.Complete, Skip: status.Skip, Available: status.Available, WaitingUpstream: status.WaitingUpstream, Backoff: status.Backoff,
		Parked: status.Parked, Acquired: status.Acquired, LeaseExpired: status.LeaseExpired, Missing: status.Missing, NotDue: status.NotDue, Due: optionalTime(grid, status.Due), Gaps: status.Gaps,
		CoveredPercent: status.Covered(), FirstMissing: optionalTime(grid, status.FirstMissing),
		OldestOpen: optionalTime(grid, status.OldestOpen), LastCompleted: optionalTime(grid, status.LastCompleted),
	}
	if stored {
		out.From, out.To = optionalTime(grid, status.From), optionalTime(grid, status.To)
	}
	if n := status.LastNote; n != nil {
		out.LastNote = &noteJSON{Slot: formatIn(grid, n.Start) + "/" + grid.Interval().String(), Status: n.Status, Parked: n.Parked,
			Message: n.Message, At: formatIn(grid, n.At)}
	}
	out.WaitingOn = []waitingOnJSON{}
	for _, w := range status.WaitingOn {
		out.WaitingOn = append(out.WaitingOn, waitingOnJSON{Waiting: formatIn(grid, w.Waiting) + "/" + grid.Interval().String(),
			Series: w.Name, Interval: w.Interval, From: formatIn(grid, w.Start), To: formatIn(grid, w.End), Status: w.Status,
			Parked: w.Parked, Message: w.Message, At: optionalTime(grid, w.At)})
	}
	return out
}

func (a *app) statusCommand() *cobra.Command {
	var rf rangeFlags
	cmd := &cobra.Command{
		Use:   "status NAME --interval P [--from T --to T]",
		Short: "Summarize the coverage of a series: slots by state, gaps, share finished",
		Long: `Summarize the slots of [--from, --to) — by default from the first stored slot to
the end of the last, or to now when that is later — by state (complete, skipped, available, in backoff,
parked, acquired under a lease), the missing ones (due slots without a row), those not due yet (their end plus
the series' lag has not passed), the share finished
(complete or skipped), the oldest open slot, the last completion, and the
last note: the message written last on an open slot (a failure, a parking,
a re-open reason). See history for a slot's whole story.

Slots a locked-mode worker is processing count as available: their row lock
is invisible to a read-only report.

` + rangeHelp,
		Example: `  almanac status sensor_report --interval PT5M
  almanac status billing --interval P1D --from 2026-01-01 --to 2027-01-01 --json`,
		Args: exactArgs(1, "one series NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			iv, err := rf.check(args[0], false)
			if err != nil {
				return err
			}
			c, grid, err := a.openSeries(ctx, args[0], iv)
			if err != nil {
				return err
			}
			var from, to time.Time
			stored := true
			if rf.from != "" {
				if from, to, err = rf.resolve(grid); err != nil {
					return err
				}
			} else {
				if from, to, stored, err = c.Extent(ctx, grid); err != nil {
					return fmt.Errorf("status: %w", err)
				}
				if err := rf.checkSize(grid, from, to); stored && err != nil {
					return err
				}
			}
			var st almanac.Status
			if stored {
				if st, err = c.Status(ctx, grid, from, to); err != nil {
					return fmt.Errorf("status: %w", err)
				}
				// The default range ends at now: due slots after the last
				// stored one are missing.
				if rf.from == "" && st.Due.After(to) && rf.checkSize(grid, from, st.Due) == nil {
					if st, err = c.Status(ctx, grid, from, st.Due); err != nil {
						return fmt.Errorf("status: %w", err)
					}
				}
			}
			out := toStatusResult(grid, st, stored)
			info, err := c.LookupSeries(ctx, grid.Name(), grid.Interval().String())
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			out.Paused = toPauseJSON(info)
			pause := describePause(info)
			if a.json {
				return a.printJSON(out)
			}
			return a.printStatus(grid, out, pause)
		},
	}
	rf.register(cmd)
	return cmd
}

func (a *app) printStatus(grid almanac.Series, res statusResult, pause string) error {
	orNone := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "series\t%s %s (%s)\n", input.PrintableName(res.Name), res.Interval, res.TimeZone)
	if pause != "" {
		fmt.Fprintf(tw, "state\t%s\n", pause)
	}
	if res.From == nil {
		fmt.Fprintf(tw, "range\tno slots stored\n")
	} else {
		fmt.Fprintf(tw, "range\t[%s, %s)  %s\n", *res.From, *res.To, nouns(res.Slots, "slot", "slots"))
	}
	fmt.Fprintf(tw, "covered\t%.1f %%\n", res.CoveredPercent)
	fmt.Fprintf(tw, "complete\t%s\n", num(res.Complete))
	fmt.Fprintf(tw, "skipped\t%s\n", num(res.Skip))
	fmt.Fprintf(tw, "available\t%s\n", num(res.Available))
	if res.WaitingUpstream > 0 {
		fmt.Fprintf(tw, "waiting for upstream\t%s of them\n", num(res.WaitingUpstream))
		printWaitingOn(tw, res)
	}
	fmt.Fprintf(tw, "in backoff\t%s\n", num(res.Backoff))
	fmt.Fprintf(tw, "parked\t%s\n", num(res.Parked))
	fmt.Fprintf(tw, "acquired\t%s (%s expired)\n", num(res.Acquired), nouns(res.LeaseExpired, "lease", "leases"))
	fmt.Fprintf(tw, "missing\t%s in %s, first at %s\n", num(res.Missing), nouns(res.Gaps, "gap", "gaps"), orNone(res.FirstMissing))
	fmt.Fprintf(tw, "not due yet\t%s (due before %s)\n", num(res.NotDue), orNone(res.Due))
	fmt.Fprintf(tw, "oldest open\t%s\n", orNone(res.OldestOpen))
	fmt.Fprintf(tw, "last completed\t%s\n", orNone(res.LastCompleted))
	if n := res.LastNote; n != nil {
		status := n.Status
		if n.Parked {
			status = "parked"
		}
		fmt.Fprintf(tw, "last note\t%s (%s, %s): %s\n", n.Slot, status, n.At, clip(n.Message))
	} else {
		fmt.Fprintf(tw, "last note\t-\n")
	}
	return tw.Flush()
}

// printWaitingOn prints, under the count of slots waiting for upstream,
// what the first of them wait on, and how many more wait.
func printWaitingOn(tw io.Writer, res statusResult) {
	listed := map[string]bool{}
	for _, w := range res.WaitingOn {
		key := "  " + w.Waiting
		if listed[w.Waiting] {
			key = ""
		}
		listed[w.Waiting] = true
		status := w.Status
		if w.Parked {
			status = "parked"
		}
		note := ""
		if w.Message != "" {
			note = ": " + clip(w.Message)
		}
		fmt.Fprintf(tw, "%s\twaits on %s %s [%s, %s) %s%s\n", key, input.PrintableName(w.Series), w.Interval, w.From, w.To, status, note)
	}
	if more := res.WaitingUpstream - int64(len(listed)); more > 0 {
		fmt.Fprintf(tw, "  …\t%s not listed\n", nouns(more, "more waiting slot", "more waiting slots"))
	}
}
