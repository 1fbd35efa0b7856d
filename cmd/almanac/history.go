package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

// eventTime prints an event's time with milliseconds: a slot's events are
// often less than a second apart.
const eventTime = "2006-01-02T15:04:05.000Z07:00"

type historyResult struct {
	Name     string       `json:"name"`
	Interval string       `json:"interval"`
	Slot     string       `json:"slot"`
	Start    string       `json:"start"`
	End      string       `json:"end"`
	Current  *currentJSON `json:"current"`
	// Compacted is set for a slot whose row a compaction deleted.
	Compacted *compactedJSON `json:"compacted,omitempty"`
	Events    []eventJSON    `json:"events"`
}

type compactedJSON struct {
	Status      string  `json:"status"`
	Generation  int64   `json:"generation"`
	CompletedAt *string `json:"completed_at,omitempty"`
}

type currentJSON struct {
	Status      string  `json:"status"`
	Parked      bool    `json:"parked"`
	Generation  int64   `json:"generation"`
	Attempts    int     `json:"attempts"`
	FailCount   int     `json:"fail_count"`
	Fence       int64   `json:"fence"`
	Owner       string  `json:"owner,omitempty"`
	LeaseUntil  *string `json:"lease_until,omitempty"`
	NotBefore   *string `json:"not_before,omitempty"`
	Message     string  `json:"message,omitempty"`
	CreatedAt   string  `json:"created_at"`
	UpdatedAt   string  `json:"updated_at"`
	CompletedAt *string `json:"completed_at,omitempty"`
}

type eventJSON struct {
	At         string `json:"at"`
	Event      string `json:"event"`
	Generation int64  `json:"generation"`
	Owner      string `json:"owner,omitempty"`
	Fence      int64  `json:"fence,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	Actor      string `json:"actor,omitempty"`
	Message    string `json:"message,omitempty"`
}

type pruneResult struct {
	DryRun bool  `json:"dry_run"`
	Pruned int64 `json:"pruned"`
}

func toHistoryResult(grid almanac.Series, h almanac.History) historyResult {
	exact := func(t time.Time) string { return t.In(grid.Location()).Format(time.RFC3339Nano) }
	optional := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		s := exact(t)
		return &s
	}
	out := historyResult{Name: grid.Name(), Interval: grid.Interval().String(), Slot: h.Slot.String(),
		Start: formatIn(grid, h.Slot.Start), End: formatIn(grid, h.Slot.End), Events: []eventJSON{}}
	if c := h.Current; c != nil {
		out.Current = &currentJSON{Status: c.Status, Parked: c.Parked, Generation: c.Generation, Attempts: c.Attempts,
			FailCount: c.FailCount, Fence: c.Fence, Owner: c.Owner, LeaseUntil: optional(c.LeaseUntil),
			NotBefore: optional(c.NotBefore), Message: c.Message, CreatedAt: exact(c.CreatedAt), UpdatedAt: exact(c.UpdatedAt),
			CompletedAt: optional(c.CompletedAt)}
	}
	if c := h.Compacted; c != nil {
		out.Compacted = &compactedJSON{Status: c.Status, Generation: c.Generation, CompletedAt: optional(c.CompletedAt)}
	}
	for _, e := range h.Events {
		out.Events = append(out.Events, eventJSON{At: exact(e.At), Event: e.Event, Generation: e.Generation, Owner: e.Owner,
			Fence: e.Fence, Attempt: e.Attempt, Actor: e.Actor, Message: e.Message})
	}
	return out
}

func (a *app) historyCommand() *cobra.Command {
	var interval string
	var prune, dryRun bool
	cmd := &cobra.Command{
		Use:   "history NAME SLOT [--interval P] | history --prune [--dry-run]",
		Short: "Show a slot's history: who held it, what failed, who re-opened it and why",
		Long: `Show the slot SLOT of series NAME as it is now (status, generation, attempts,
the holder of its lease) and its recorded events, oldest first: every run's
outcome (completed, failed, parked, skipped, snoozed, released) with the
worker's owner id, fencing token and attempt; runs that lost the slot
(taken_over, ejected); and re-opens, retries and skips by people and programs
(reopened, retried, skipped, changed_by_sql for plain SQL) with the actor and
the reason. A claim is not an event: the holder of a lease is on the slot
row. A locked-mode worker holds a slot with a row lock, which shows nowhere
until it finishes.

SLOT is a slot's text, 2026-03-29T00:00:00+01:00/P1D (the interval may then
be left out), or any time in the slot (RFC 3339, or a local date or time in
the series' zone), which needs --interval.

Events are kept for the schema's retention (90 days unless changed with
UPDATE <schema>.settings SET history_retention = '30 days', as the migration
role); schedulers prune
older ones as they run, and --prune does it now.`,
		Example: `  almanac history billing 2026-03-10T00:00:00+01:00/P1D
  almanac history sensor_report 2026-03-01T10:07 --interval PT5M --json
  almanac history --prune --dry-run`,
		Args: func(cmd *cobra.Command, args []string) error {
			if prune {
				if len(args) > 0 {
					return usagef("history --prune takes no arguments, got %d; see %q", len(args), cmd.CommandPath()+" --help")
				}
				return nil
			}
			return exactArgs(2, "a series NAME and a SLOT")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if prune {
				if interval != "" {
					return usagef("history --prune prunes every series; --interval %q does not apply", interval)
				}
				c, err := a.connectMigrated(ctx)
				if err != nil {
					return err
				}
				n, err := c.PruneHistory(ctx, almanac.WriteOptions{DryRun: dryRun})
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(pruneResult{DryRun: dryRun, Pruned: n})
				}
				verb := "pruned"
				if dryRun {
					verb = "dry run: would prune"
				}
				fmt.Fprintf(a.stdout, "%s %d history event(s) older than the retention\n", verb, n)
				return nil
			}
			if dryRun {
				return usagef("--dry-run applies to history --prune only")
			}
			name, text := args[0], args[1]
			if err := input.CheckName(name); err != nil {
				return usageError(err)
			}
			iv, isSlot, err := parseSlotArg(text, interval)
			if err != nil {
				return err
			}
			c, grid, err := a.openSeries(ctx, name, iv)
			if err != nil {
				return err
			}
			var at time.Time
			if isSlot {
				sl, err := grid.ParseSlot(text)
				if err != nil {
					return usageError(err)
				}
				at = sl.Start
			} else if at, err = slot.ParseTime(text, grid.Location()); err != nil {
				return usageError(err)
			}
			h, err := c.History(ctx, grid, at)
			if err != nil {
				return err
			}
			res := toHistoryResult(grid, h)
			if a.json {
				return a.printJSON(res)
			}
			return a.printHistory(grid, h)
		},
	}
	cmd.Flags().StringVar(&interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M (needed when SLOT is a time)")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete the events older than the schema's retention, of every series")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "with --prune: count what would be deleted; delete nothing")
	return cmd
}

// parseSlotArg checks the SLOT argument before anything connects and
// returns the series' interval: --interval, or the one the slot's text
// carries (both must then agree). isSlot tells a slot's text from a time.
func parseSlotArg(text, interval string) (iv slot.Interval, isSlot bool, err error) {
	var given *slot.Interval
	if interval != "" {
		v, err := slot.ParseInterval(interval)
		if err != nil {
			return iv, false, usageError(fmt.Errorf("--interval: %w", err))
		}
		given = &v
	}
	start, rest, isSlot := strings.Cut(text, "/")
	if _, err := slot.ParseTime(start, time.UTC); err != nil {
		return iv, false, usageError(fmt.Errorf("SLOT: %w; expected a slot such as 2026-03-01T00:00:00Z/PT5M or a time", err))
	}
	if isSlot && strings.HasPrefix(rest, "P") {
		v, err := slot.ParseInterval(rest)
		if err != nil {
			return iv, false, usageError(fmt.Errorf("SLOT %q: %w", text, err))
		}
		if given != nil && given.String() != v.String() {
			return iv, false, usagef("SLOT %q is a %s slot but --interval is %s", text, v, given)
		}
		return v, true, nil
	}
	if isSlot {
		if _, err := slot.ParseTime(rest, nil); err != nil {
			return iv, false, usageError(fmt.Errorf("SLOT %q: end: %w", text, err))
		}
	}
	if given == nil {
		return iv, false, usagef("--interval is required when SLOT %q does not name its interval, e.g. --interval PT5M", text)
	}
	return *given, isSlot, nil
}

func (a *app) printHistory(grid almanac.Series, h almanac.History) error {
	at := func(t time.Time) string { return t.In(grid.Location()).Format(eventTime) }
	fmt.Fprintf(a.stdout, "slot  %s %s\n", input.PrintableName(grid.Name()), h.Slot)
	if c := h.Compacted; c != nil {
		line := fmt.Sprintf("now   %s, compacted (row deleted; its run's highest generation %d", c.Status, c.Generation)
		if !c.CompletedAt.IsZero() {
			line += ", latest completion " + at(c.CompletedAt)
		}
		fmt.Fprintln(a.stdout, line+")")
	} else if c := h.Current; c == nil {
		fmt.Fprintln(a.stdout, "now   not stored (missing, or never materialized)")
	} else {
		status := c.Status
		if c.Parked {
			status = "AVAILABLE (parked)"
		}
		line := fmt.Sprintf("now   %s, generation %d, attempts %d, failures %d, fence %d", status, c.Generation, c.Attempts, c.FailCount, c.Fence)
		switch {
		case c.Status == almanac.StatusAcquired:
			line += ", leased by " + c.Owner + " until " + at(c.LeaseUntil)
		case !c.NotBefore.IsZero():
			line += ", in backoff until " + at(c.NotBefore)
		case !c.CompletedAt.IsZero() && c.Status == almanac.StatusComplete:
			line += ", completed " + at(c.CompletedAt)
		}
		fmt.Fprintln(a.stdout, line+"; created "+at(c.CreatedAt))
		if c.Message != "" {
			fmt.Fprintln(a.stdout, "      message: "+clip(c.Message))
		}
	}
	if len(h.Events) == 0 {
		fmt.Fprintln(a.stdout, "no events recorded")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tGEN\tATTEMPT\tFENCE\tBY\tMESSAGE")
	dash := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, e := range h.Events {
		by := e.Actor
		if by == "" && e.Owner != "" {
			by = "worker " + e.Owner
		}
		if by == "" {
			by = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", at(e.At), shown(e.Event), e.Generation, dash(int64(e.Attempt)), dash(e.Fence), clip(by), clip(e.Message))
	}
	return tw.Flush()
}

// clip makes stored text fit one cell of a table: shown, at most 200
// characters (--json has it whole).
func clip(s string) string {
	s = shown(s)
	if utf8.RuneCountInString(s) > 200 {
		s = string([]rune(s)[:199]) + "…"
	}
	return s
}
