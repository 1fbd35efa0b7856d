package suite

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"time"

	"github.com/almanacdev/almanac/slot"
)

const (
	// memoryOpen is how many slots at the end of each memory series are
	// AVAILABLE when the sidecar starts.
	memoryOpen = 100
	// memoryHoles is how many single missing slots each memory series has.
	memoryHoles = 50
)

// memorySeries is a series of the memory scenario: n slots, COMPLETE but
// for memoryHoles missing ones and the last memoryOpen.
type memorySeries struct {
	grid slot.Series
	n    int
}

// runMemory: peak RSS of two almanac processes over a 1M-slot series —
// `almanac gaps` over the whole range and the sidecar, `almanac run --once`,
// which checks the whole range for missing slots, materializes the holes
// and runs a command for each open slot — against the same commands over a
// 1,000-slot series with the same holes and open slots.
func runMemory(ctx context.Context, e *env) ([]Row, error) {
	gapsName := fmt.Sprintf("peak RSS, almanac gaps over %s slots, %d holes", count(e.size.memory), memoryHoles)
	runName := fmt.Sprintf("peak RSS, almanac run --once over %s slots, %d open", count(e.size.memory), memoryOpen+memoryHoles)
	small := Figure{Label: "same, " + count(e.size.memorySmall) + " slots", Unit: MiB}
	why := rssUnsupported
	truePath, err := exec.LookPath("true")
	switch {
	case len(e.opts.CLI) == 0:
		why = "no almanac command line to run: build it (go build -o /tmp/almanac ./cmd/almanac) and pass --almanac /tmp/almanac"
	case err != nil:
		why = "no true command to run per slot"
	}
	if why != "" {
		rows := []Row{{ID: "memory-gaps", Name: gapsName}, {ID: "memory-run", Name: runName}}
		for i := range rows {
			rows[i].Engine, rows[i].Baseline = Figure{Label: "almanac", Unit: MiB}, small
			rows[i].Result, rows[i].Note = Skipped, why
		}
		return rows, nil
	}

	s, err := e.newSchema(ctx, "memory")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	sides := []memorySeries{{n: e.size.memory}, {n: e.size.memorySmall}}
	for i, name := range []string{"big", "small"} {
		if sides[i].grid, err = s.series(ctx, name); err != nil {
			return nil, err
		}
		if err := s.load(ctx, sides[i].grid, sides[i].n, "COMPLETE"); err != nil {
			return nil, err
		}
	}

	var gaps, runs [2][]float64
	for r := range e.repeats {
		if err := s.resetMemory(ctx, sides); err != nil {
			return nil, err
		}
		order := []int{0, 1}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			m := sides[i]
			from, to := slot.FormatTime(at(0)), slot.FormatTime(at(m.n))
			gapsRSS, err := s.rss(ctx, "gaps", m.grid.Name(), "--interval", "PT1M", "--from", from, "--to", to, "--json")
			if err != nil {
				return nil, err
			}
			e.advance()
			runRSS, err := s.rss(ctx, "run", m.grid.Name(), "--interval", "PT1M", "--from", from, "--to", to,
				"--once", "--workers", "2", "--", truePath)
			if err != nil {
				return nil, err
			}
			e.advance()
			complete, err := s.count(ctx, `SELECT count(*) FROM {{schema}}.slot WHERE name = $1 AND status = 'COMPLETE'`, m.grid.Name())
			if err != nil {
				return nil, err
			}
			if complete != int64(m.n) {
				return nil, fmt.Errorf("%d of %d slots COMPLETE after almanac run --once", complete, m.n)
			}
			gaps[i], runs[i] = append(gaps[i], gapsRSS), append(runs[i], runRSS)
		}
	}
	engine := Figure{Label: "almanac", Unit: MiB}
	return []Row{
		newRow("memory-gaps", gapsName, engine, small, gaps[0], gaps[1], nil),
		newRow("memory-run", runName, engine, small, runs[0], runs[1], nil),
	}, nil
}

// resetMemory puts the memory series back in their initial state: the
// holes deleted, the last slots AVAILABLE, the table vacuumed.
func (s *schema) resetMemory(ctx context.Context, sides []memorySeries) error {
	for _, m := range sides {
		holes := make([]time.Time, memoryHoles)
		for i := range holes {
			holes[i] = at((i + 1) * (m.n - memoryOpen) / (memoryHoles + 1))
		}
		_, err := s.exec(ctx, `DELETE FROM {{schema}}.slot WHERE name = $1 AND "interval" = $2 AND slot_start = ANY($3)`,
			m.grid.Name(), m.grid.Interval().String(), holes)
		if err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		_, err = s.exec(ctx, `UPDATE {{schema}}.slot SET status = 'AVAILABLE', completed_at = NULL, attempts = 0
			WHERE name = $1 AND "interval" = $2 AND slot_start >= $3`, m.grid.Name(), m.grid.Interval().String(), at(m.n-memoryOpen))
		if err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	return s.vacuum(ctx)
}

// rss runs almanac's command line with args on the schema and returns its
// peak resident set size in MiB.
func (s *schema) rss(ctx context.Context, args ...string) (float64, error) {
	cli := s.e.opts.CLI
	cmd := exec.CommandContext(ctx, cli[0], append(append(slices.Clone(cli[1:]), "--schema", s.name), args...)...)
	cmd.Env = s.e.opts.Env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	rss, err := runPeakRSS(cmd)
	if err != nil {
		return 0, fmt.Errorf("almanac %s: %w: %s", args[0], err, lastLine(stderr.Bytes()))
	}
	return rss, nil
}
