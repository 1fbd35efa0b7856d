//go:build linux

package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/almanacdev/almanac/internal/testkit/longtest"
)

// The shape of a many-series round: the workers run the root package's
// engine (almanac.Client) with a job per series, as a multi-tenant program
// does, over a backfill range of each series that their engines register
// and materialize as they start.
const (
	// manySeries is how many series a round works, named
	// chaos_tenant_0000 and on.
	manySeries   = 1000
	seriesPrefix = "chaos_tenant"
	// engineConcurrency is each engine's Options.Concurrency; every job
	// is capped at one worker (Job.Concurrency), which the check verifies.
	engineConcurrency = 3
)

// seriesSlots is how many slots each series' range holds: 2,000 slots in
// all, 8,000 with ALMANAC_LONG_TESTS.
var seriesSlots = longtest.Pick(2, 8)

// engineFleet is the fleet of a many-series round: every mode, locked and
// lease mode also as the hostile role. Handlers are short, so that the
// round's thousands of slots fit in a CI run; the hostile locked worker's
// outlast the role's timeouts, as in fleetPlan.
var engineFleet = []fleetWorker{
	{"locked", false, 10 * time.Millisecond, 60 * time.Millisecond},
	{"locked", true, 450 * time.Millisecond, 650 * time.Millisecond},
	{"batch", false, 5 * time.Millisecond, 30 * time.Millisecond},
	{"batch", false, 5 * time.Millisecond, 30 * time.Millisecond},
	{"lease", false, 10 * time.Millisecond, 80 * time.Millisecond},
	{"lease", true, 10 * time.Millisecond, 80 * time.Millisecond},
}

// TestChaosSeries runs the root engine over 1,000 series in every mode
// under the same faults as TestChaos (but the materialize wave: the
// engines materialize), and checks the same invariants per series, that
// every series got every slot done, and that no job ever ran more workers
// in a process than its Job.Concurrency.
func TestChaosSeries(t *testing.T) {
	chaos(t, func(t *testing.T) *scenario {
		names := make([]string, manySeries)
		for i := range names {
			names[i] = tenantName(i)
		}
		return newScenario(t, names, rangeFrom, rangeFrom.Add(time.Duration(seriesSlots)*time.Minute), engineFleet, true)
	})
}

// tenantName names series i of a many-series round, as the worker does
// (its engineSeries).
func tenantName(i int) string { return fmt.Sprintf("%s_%04d", seriesPrefix, i) }

// TestCheckConcurrency: the per-job check of a many-series round flags two
// attempts of one series by one process that overlap, and only those: not
// consecutive ones, not those of other processes or series, not the
// suite's ejections, and not one that began MaxWork after the attempt it
// overlaps (a locked-mode handler the engine abandoned).
func TestCheckConcurrency(t *testing.T) {
	at := func(ms int) time.Time { return rangeFrom.Add(time.Duration(ms) * time.Millisecond) }
	ended := func(ms int) *time.Time { e := at(ms); return &e }
	attempt := func(fence int64, pid int32, name, mode string, from int, to *time.Time) entry {
		return entry{fence: fence, pid: pid, name: name, worker: "w", mode: mode, slotStart: rangeFrom, started: at(from), ended: to}
	}
	maxWork := map[string]time.Duration{"w": time.Second}
	for _, c := range []struct {
		name    string
		entries []entry
		flagged bool
	}{
		{"consecutive", []entry{attempt(1, 1, "a", "locked", 0, ended(100)), attempt(2, 1, "a", "locked", 100, ended(200))}, false},
		{"overlapping", []entry{attempt(1, 1, "a", "locked", 0, ended(100)), attempt(2, 1, "a", "locked", 50, ended(200))}, true},
		{"still running", []entry{attempt(1, 1, "a", "lease", 0, nil), attempt(2, 1, "a", "lease", 50, ended(200))}, true},
		{"other process", []entry{attempt(1, 1, "a", "locked", 0, ended(100)), attempt(2, 2, "a", "locked", 50, ended(200))}, false},
		{"other series", []entry{attempt(1, 1, "a", "locked", 0, ended(100)), attempt(2, 1, "b", "locked", 50, ended(200))}, false},
		{"ejection", []entry{attempt(1, 1, "a", "lease", 0, ended(100)), attempt(2, 1, "a", "eject", 50, ended(200))}, false},
		{"abandoned", []entry{attempt(1, 1, "a", "locked", 0, ended(1500)), attempt(2, 1, "a", "locked", 1250, ended(1400))}, false},
	} {
		rep := &report{}
		rep.checkConcurrency(c.entries, maxWork)
		if got := len(rep.violations) > 0; got != c.flagged {
			t.Errorf("%s: flagged %v, want %v (%v)", c.name, got, c.flagged, rep.violations)
		}
	}
}
