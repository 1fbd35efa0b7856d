package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/progress"
	"github.com/almanacdev/almanac/slot"
)

// defaultMaxSlots is the default of --max-slots: a range larger than this
// is almost always a typo (a year too many, PT1S for PT1H).
const defaultMaxSlots = 10_000_000

// rangeFlags are the flags of the coverage commands: the series' interval
// and a range of it.
type rangeFlags struct {
	interval string
	from, to string
	maxSlots int64
}

func (f *rangeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.interval, "interval", "", "ISO-8601 interval of the series, e.g. PT5M, P1D (required)")
	cmd.Flags().StringVar(&f.from, "from", "", "start of the range: RFC 3339, or a local date/time in the series' zone")
	cmd.Flags().StringVar(&f.to, "to", "", "end of the range, exclusive")
	cmd.Flags().Int64Var(&f.maxSlots, "max-slots", defaultMaxSlots, "refuse ranges holding more slots than this")
}

// rangeHelp is the shared part of the coverage commands' help.
const rangeHelp = `Times are RFC 3339 (2026-03-01T00:00:00Z, 2026-03-29T00:00:00+01:00) or a local
date or date and time read in the series' zone (2026-03-01, 2026-03-01T06:00).
The range [--from, --to) holds the slots whose start lies in it; ranges of more
than --max-slots slots are refused.`

// check validates the command line before anything connects: name,
// interval, and what can be checked of the times before the series' zone is
// known from the database (slot.CheckTime). Every error is a usage error
// naming the bad value.
func (f *rangeFlags) check(name string, needRange bool) (slot.Interval, error) {
	iv, err := seriesArgs(name, f.interval)
	if err != nil {
		return slot.Interval{}, err
	}
	if needRange && (f.from == "" || f.to == "") {
		return slot.Interval{}, usagef("--from and --to are required, e.g. --from 2026-03-01 --to 2026-03-02")
	}
	if (f.from == "") != (f.to == "") {
		return slot.Interval{}, usagef("give both --from and --to, or neither")
	}
	if f.maxSlots <= 0 {
		return slot.Interval{}, usagef("--max-slots %d: expected a positive number", f.maxSlots)
	}
	for _, t := range []struct{ flag, text string }{{"--from", f.from}, {"--to", f.to}} {
		if t.text == "" {
			continue
		}
		if err := slot.CheckTime(t.text); err != nil {
			return slot.Interval{}, usageError(fmt.Errorf("%s: %w", t.flag, err))
		}
	}
	return iv, nil
}

// resolve reads the range in the series' zone and checks it: not reversed,
// at most --max-slots slots.
func (f *rangeFlags) resolve(grid almanac.Series) (from, to time.Time, err error) {
	if from, err = slot.ParseTime(f.from, grid.Location()); err != nil {
		return from, to, usageError(fmt.Errorf("--from: %w", err))
	}
	if to, err = slot.ParseTime(f.to, grid.Location()); err != nil {
		return from, to, usageError(fmt.Errorf("--to: %w", err))
	}
	return from, to, f.checkSize(grid, from, to)
}

// errTooManySlots is wrapped by the error for a range larger than
// --max-slots; it matches almanac.ErrInvalid.
var errTooManySlots = input.Kind("too many slots")

func (f *rangeFlags) checkSize(grid almanac.Series, from, to time.Time) error {
	n, err := grid.Count(from, to)
	if err != nil {
		return usageError(err)
	}
	if n > f.maxSlots {
		return usageError(fmt.Errorf("%w: [%s, %s) holds %s %s slots, more than the maximum of %s; raise --max-slots to %d to allow it",
			errTooManySlots, slot.FormatTime(from), slot.FormatTime(to), num(n), grid.Interval(), num(f.maxSlots), n))
	}
	return nil
}

// openRange does what every range command starts with: it checks the
// command line, connects, loads the series and reads --from and --to in
// the series' zone.
func (a *app) openRange(ctx context.Context, rf *rangeFlags, name string) (c *almanac.Client, s almanac.Series, from, to time.Time, err error) {
	iv, err := rf.check(name, true)
	if err != nil {
		return nil, s, from, to, err
	}
	if c, s, err = a.openSeries(ctx, name, iv); err != nil {
		return nil, s, from, to, err
	}
	from, to, err = rf.resolve(s)
	return c, s, from, to, err
}

// openSeries connects and loads the series (name, iv); a zero iv (no
// --interval) means the name's only interval. The client records changes
// in the history as made by --actor (default: the operator, user@host). An
// unknown series is bad input (exit 2), like any other name that does not
// exist; the error names the intervals the name has, if any, so that a
// series registered as P1D is not registered again as PT24H.
func (a *app) openSeries(ctx context.Context, name string, iv slot.Interval) (*almanac.Client, almanac.Series, error) {
	if err := input.CheckActor(a.actor); err != nil {
		return nil, almanac.Series{}, usageError(fmt.Errorf("--actor: %w", err))
	}
	c, err := a.connectMigrated(ctx)
	if err != nil {
		return nil, almanac.Series{}, err
	}
	if iv != (slot.Interval{}) {
		info, err := c.LookupSeries(ctx, name, iv.String())
		if !errors.Is(err, almanac.ErrUnknownSeries) {
			return c, info.Series, err
		}
	}
	all, err := c.ListSeries(ctx)
	if err != nil {
		return nil, almanac.Series{}, err
	}
	var intervals []string
	var only almanac.Series
	for _, s := range all {
		if s.Series.Name() == name {
			intervals = append(intervals, s.Series.Interval().String())
			only = s.Series
		}
	}
	shown := strconv.Quote(name)
	switch {
	case len(intervals) == 0 && iv == (slot.Interval{}):
		return nil, almanac.Series{}, usageError(fmt.Errorf("%w: no series is named %s; register it with almanac series add %s --interval P (see almanac series list)",
			almanac.ErrUnknownSeries, shown, shellWord(name)))
	case len(intervals) == 0:
		return nil, almanac.Series{}, usageError(fmt.Errorf("%w: no series is named %s; register it with almanac series add %s --interval %s (see almanac series list)",
			almanac.ErrUnknownSeries, shown, shellWord(name), iv))
	case iv != (slot.Interval{}):
		return nil, almanac.Series{}, usageError(fmt.Errorf("%w: series %s has no interval %s; it exists with %s %s: use --interval %s",
			almanac.ErrUnknownSeries, shown, iv, plural(len(intervals), "interval", "intervals"), strings.Join(intervals, ", "), intervals[0]))
	case len(intervals) > 1:
		return nil, almanac.Series{}, usagef("series %s has %d intervals, %s: choose one with --interval", shown, len(intervals), strings.Join(intervals, ", "))
	}
	return c, only, nil
}

// shellWord quotes s for a shell command line a message suggests, when it
// needs quoting.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r == '-' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// registerActor adds --actor to a command that changes slots.
func (a *app) registerActor(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.actor, "actor", "", "who asks, recorded in the slots' history (default: the operator, user@host)")
}

// operator names the person running the command, user@host, for the
// slots' history; "" (the database role is recorded then) when that
// cannot be stored.
func (a *app) operator() string {
	name := a.getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	actor := name + "@" + host
	if name == "" || host == "" || input.CheckActor(actor) != nil {
		return ""
	}
	return actor
}

// progressBar returns the progress callback of an operation, and a function
// that clears the bar before output: a bar only on a terminal, never with
// --json.
func (a *app) progressBar(label string) (func(done, total int64), func()) {
	bar := progress.ForTerminal(a.stderr, label, !a.json)
	if bar == nil {
		return nil, func() {}
	}
	return bar.Set, bar.Clear
}

// rangeJSON is the machine form of the series and range a command worked on.
type rangeJSON struct {
	Name     string `json:"name"`
	Interval string `json:"interval"`
	From     string `json:"from"`
	To       string `json:"to"`
}

func toRangeJSON(grid almanac.Series, from, to time.Time) rangeJSON {
	return rangeJSON{Name: grid.Name(), Interval: grid.Interval().String(),
		From: formatIn(grid, from), To: formatIn(grid, to)}
}

// formatIn prints t in the series' zone, the form slot texts use.
func formatIn(grid almanac.Series, t time.Time) string {
	return slot.FormatTime(t.In(grid.Location()))
}

// optionalTime prints t in the series' zone, or null when zero.
func optionalTime(grid almanac.Series, t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatIn(grid, t)
	return &s
}

// describeRange names the series, the zone its local times are read in,
// and the range as read: "billing P1D (Europe/Berlin) in
// [2026-03-01T00:00:00+01:00, 2026-03-03T00:00:00+01:00)".
func describeRange(grid almanac.Series, from, to time.Time) string {
	return fmt.Sprintf("%s %s (%s) in [%s, %s)", input.PrintableName(grid.Name()), grid.Interval(), grid.Location(), formatIn(grid, from), formatIn(grid, to))
}

// heldJSON is the machine form of a slot left alone because it is held.
type heldJSON struct {
	Slot       string  `json:"slot"`
	Start      string  `json:"start"`
	End        string  `json:"end"`
	Status     string  `json:"status"`
	Locked     bool    `json:"locked"`
	Owner      string  `json:"owner,omitempty"`
	LeaseUntil *string `json:"lease_until,omitempty"`
}

func toHeldJSON(grid almanac.Series, held []almanac.Held) []heldJSON {
	out := make([]heldJSON, len(held))
	for i, h := range held {
		out[i] = heldJSON{
			Slot: formatIn(grid, h.Start) + "/" + grid.Interval().String(), Start: formatIn(grid, h.Start), End: formatIn(grid, h.End),
			Status: h.Status, Locked: h.Locked, Owner: h.Owner, LeaseUntil: optionalTime(grid, h.LeaseUntil),
		}
	}
	return out
}

// printHeld lists held slots as a table, after a line saying why they were
// left alone.
func printHeld(w io.Writer, grid almanac.Series, held []almanac.Held) error {
	if len(held) == 0 {
		return nil
	}
	fmt.Fprintf(w, "%s in flight %s left alone:\n", nouns(len(held), "slot", "slots"), plural(len(held), "was", "were"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tSTATUS\tHELD BY")
	for _, h := range toHeldJSON(grid, held) {
		by := "a row lock (locked-mode worker)"
		if !h.Locked {
			by = "lease of " + h.Owner
			if h.LeaseUntil != nil {
				by += " until " + *h.LeaseUntil
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", h.Slot, h.Status, by)
	}
	return tw.Flush()
}

// parseStates reads --states: a comma-separated list of statuses.
func parseStates(text string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(text, ",") {
		s = strings.ToUpper(strings.TrimSpace(s))
		if s != almanac.StatusComplete && s != almanac.StatusSkip {
			return nil, usagef("--states %q: expected COMPLETE, SKIP or COMPLETE,SKIP", text)
		}
		out = append(out, s)
	}
	return out, nil
}
