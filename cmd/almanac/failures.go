package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

type failuresResult struct {
	Failures []failureJSON `json:"failures"`
	// More is set when more slots failed than --limit listed.
	More bool `json:"more"`
}

type failureJSON struct {
	Name      string  `json:"name"`
	Interval  string  `json:"interval"`
	Slot      string  `json:"slot"`
	Parked    bool    `json:"parked"`
	Attempts  int     `json:"attempts"`
	FailCount int     `json:"fail_count"`
	RetryAt   *string `json:"retry_at"`
	Message   string  `json:"message"`
	At        string  `json:"at"`
}

func (a *app) failuresCommand() *cobra.Command {
	var from, to string
	var limit int
	cmd := &cobra.Command{
		Use:   "failures [NAME] [--from T --to T] [--json]",
		Short: "List failed and parked slots with their last error; exit 1 when there are any",
		Long: `List the slots whose last run failed, of every series or of the series NAME
(every interval): those waiting for a retry and those parked (they gave up
and wait for 'almanac retry'), with the attempts of the current generation,
the failures since the last success or re-open, when the slot is tried
again, the last error (at most 500 bytes) and when it was recorded. Slots
being worked on right now are left out.

Exit status 0 when there is none, 1 when there is at least one, so that a
pipeline can gate on it; 2 for bad input, 3 when the database is unreachable.

--from and --to keep the slots starting in [--from, --to): RFC 3339 times
(2026-03-01T00:00:00Z, 2026-03-29T00:00:00+01:00), or a local date or time,
read as UTC. At most --limit slots are listed, in order of series and slot.
See 'almanac history NAME SLOT' for a slot's whole story.`,
		Example: `  almanac failures
  almanac failures billing --from 2026-01-01 --to 2027-01-01
  almanac failures sensor_report --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("%s expects at most one series NAME, got %d arguments; see %q", cmd.CommandPath(), len(args), cmd.CommandPath()+" --help")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var opts almanac.FailuresOptions
			if len(args) == 1 {
				if err := input.CheckName(args[0]); err != nil {
					return usageError(err)
				}
				opts.Name = args[0]
			}
			for _, t := range []struct {
				flag, text string
				into       *time.Time
			}{{"from", from, &opts.From}, {"to", to, &opts.To}} {
				if t.text == "" {
					continue
				}
				v, err := slot.ParseTime(t.text, time.UTC)
				if err != nil {
					return usageError(fmt.Errorf("--%s: %w", t.flag, err))
				}
				*t.into = v
			}
			if !opts.From.IsZero() && !opts.To.IsZero() && !opts.From.Before(opts.To) {
				return usagef("--from %s is not before --to %s: expected from < to", from, to)
			}
			if limit < 1 || limit > 1_000_000 {
				return usagef("--limit %d: expected 1 to 1000000", limit)
			}
			opts.Limit = limit
			c, err := a.connectMigrated(ctx)
			if err != nil {
				return err
			}
			if opts.Name != "" {
				list, err := c.ListSeries(ctx)
				if err != nil {
					return fmt.Errorf("failures: %w", err)
				}
				if !slices.ContainsFunc(list, func(s almanac.SeriesInfo) bool { return s.Series.Name() == opts.Name }) {
					return usageError(fmt.Errorf("%w: no series is named %s", almanac.ErrUnknownSeries, input.PrintableName(opts.Name)))
				}
			}
			list, more, err := c.Failures(ctx, opts)
			if err != nil {
				return fmt.Errorf("failures: %w", err)
			}
			out := failuresResult{Failures: []failureJSON{}, More: more}
			for _, f := range list {
				// A slot's text, as status and history print it.
				j := failureJSON{Name: f.Name, Interval: f.Interval, Slot: slot.FormatTime(f.Start) + "/" + f.Interval, Parked: f.Parked, Attempts: f.Attempts,
					FailCount: f.FailCount, Message: f.Message, At: slot.FormatTime(f.At)}
				if !f.NotBefore.IsZero() {
					s := slot.FormatTime(f.NotBefore)
					j.RetryAt = &s
				}
				out.Failures = append(out.Failures, j)
			}
			if a.json {
				err = a.printJSON(out)
			} else {
				err = a.printFailures(out)
			}
			if err != nil || len(list) == 0 {
				return err
			}
			what := nouns(len(list), "failed or parked slot", "failed or parked slots")
			if more {
				what = "more than " + what
			}
			return problemError(fmt.Errorf("%s: %s; see almanac history NAME SLOT for a slot's story", what, failuresHint(list, a.now())))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "", "list only slots starting at or after this time")
	fl.StringVar(&to, "to", "", "list only slots starting before this time")
	fl.IntVar(&limit, "limit", defaults.FailuresLimit, "list at most this many slots")
	return cmd
}

// overdueAfter is how long past its next try a failed slot waits before
// the CLI says no worker is running: a running worker looks for due slots
// every few seconds (the coverage page uses the same minute).
const overdueAfter = time.Minute

// isDue reports whether f waits for no one but a worker: not parked, and
// its backoff (if any) over at now. Retry leaves such slots alone.
func isDue(f almanac.Failure, now time.Time) bool {
	return !f.Parked && !f.NotBefore.After(now)
}

// failuresHint says what will become of the failed slots listed, as of now:
// those due for a retry are retried by any running worker, so if they are
// overdue none is running; those in backoff and the parked ones wait for
// their time or for almanac retry.
func failuresHint(list []almanac.Failure, now time.Time) string {
	var overdue, dueNow, backoff, parked int
	var lastDue time.Time
	for _, f := range list {
		due := f.NotBefore
		if due.IsZero() {
			due = f.At // due since its failure was recorded
		}
		switch {
		case f.Parked:
			parked++
		case !isDue(f, now):
			backoff++
		case now.Sub(due) > overdueAfter:
			overdue++
			if due.After(lastDue) {
				lastDue = due
			}
		default:
			dueNow++
		}
	}
	var parts []string
	if overdue > 0 {
		parts = append(parts, fmt.Sprintf("%s due for a retry since %s, which any running worker makes: is a worker running (almanac run, or your program)?",
			num(overdue), slot.FormatTime(lastDue)))
	}
	if dueNow > 0 {
		parts = append(parts, fmt.Sprintf("%s due for a retry now: a running worker takes %s within moments", num(dueNow), plural(dueNow, "it", "them")))
	}
	if backoff > 0 {
		parts = append(parts, fmt.Sprintf("%s in backoff: almanac retry runs %s now", num(backoff), plural(backoff, "it", "them")))
	}
	if parked > 0 {
		parts = append(parts, fmt.Sprintf("%s parked: almanac retry gives %s a fresh set of attempts", num(parked), plural(parked, "it", "them")))
	}
	return strings.Join(parts, "; ")
}

func (a *app) printFailures(res failuresResult) error {
	if len(res.Failures) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no failed or parked slots")
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERIES\tSLOT\tSTATE\tATTEMPTS\tFAILURES\tRETRY AT\tAT\tLAST ERROR")
	for _, f := range res.Failures {
		state, retry := "failed", "now"
		if f.Parked {
			state, retry = "parked", "-"
		} else if f.RetryAt != nil {
			retry = *f.RetryAt
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", input.PrintableName(f.Name), f.Slot, state, num(f.Attempts), num(f.FailCount),
			retry, f.At, shown(f.Message))
	}
	if res.More {
		fmt.Fprintln(tw, "…\tmore not listed (raise --limit)")
	}
	return tw.Flush()
}
