//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// slotKey names a slot: its series and start (UTC). The zero key names
// the whole round.
type slotKey struct {
	name  string
	start time.Time
}

func (k slotKey) String() string { return k.name + " " + k.start.Format(time.RFC3339) + "/" + interval }

// entry is an attempt as the worker recorded it in the ledger.
type entry struct {
	fence      int64
	name       string
	slotStart  time.Time
	worker     string
	pid        int32
	mode       string
	owner      *string
	leaseUntil *time.Time
	started    time.Time
	ended      *time.Time
	outcome    *string
	detail     *string
}

// effect is an effect row: committed, so accepted.
type effect struct {
	id, fence, xid       int64
	name                 string
	slotStart, writtenAt time.Time
}

// change is a committed change of a slot row, recorded by the trigger.
type change struct {
	id, xid              int64
	name                 string
	slotStart, at        time.Time
	oldStatus, newStatus string
	oldFence, newFence   int64
	oldOwner, newOwner   *string
	oldLeaseUntil        *time.Time
	oldGen, newGen       int64
}

type slotRow struct {
	name, interval string
	start, end     time.Time
	status         string
	fence          int64
}

// violation is a broken invariant, about one slot (zero for the round).
type violation struct {
	slot   slotKey
	what   string
	fences []int64 // the attempts involved
}

// report is what the checks found.
type report struct {
	slots, complete, skipped int
	series, seriesDone       int // series, and those with every slot done
	entries, open            int
	refused, rolledBack      int
	effects, expected        int
	duplicates, missing      int
	reopened                 int            // COMPLETE → AVAILABLE transitions
	staleRuns                int            // completions on stale input, turned into the next generation
	byWorker                 map[string]int // accepted completions
	violations               []violation
	drain, total             time.Duration

	// For describing violations.
	ledger    map[slotKey][]entry
	history   map[slotKey][]change
	effectsOf map[int64][]effect // by fence
}

func (rep *report) fail(slot slotKey, format string, args ...any) {
	rep.violations = append(rep.violations, violation{slot: slot, what: fmt.Sprintf(format, args...)})
}

func (rep *report) failFences(slot slotKey, fences []int64, format string, args ...any) {
	rep.violations = append(rep.violations, violation{slot: slot, what: fmt.Sprintf(format, args...), fences: fences})
}

// check loads what the workers and the engine left and checks every
// invariant.
func (r *round) check() *report {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := &report{ledger: map[slotKey][]entry{}, history: map[slotKey][]change{}, effectsOf: map[int64][]effect{}}
	from, to := r.sc.from, r.sc.to

	rows := load(ctx, r, `SELECT name, "interval", slot_start, slot_end, status, fence FROM {{schema}}.slot
		WHERE name <> '`+upstreamName+`' ORDER BY name, slot_start`,
		func(s *slotRow) []any { return []any{&s.name, &s.interval, &s.start, &s.end, &s.status, &s.fence} })
	entries := load(ctx, r, `SELECT fence, name, slot_start, worker, pid, mode, owner::text, lease_until, started, ended, outcome, detail
		FROM {{schema}}.chaos_ledger ORDER BY fence`,
		func(e *entry) []any {
			return []any{&e.fence, &e.name, &e.slotStart, &e.worker, &e.pid, &e.mode, &e.owner, &e.leaseUntil, &e.started, &e.ended, &e.outcome, &e.detail}
		})
	effects := load(ctx, r, `SELECT id, fence, xid, name, slot_start, written_at FROM {{schema}}.chaos_effect ORDER BY id`,
		func(e *effect) []any { return []any{&e.id, &e.fence, &e.xid, &e.name, &e.slotStart, &e.writtenAt} })
	changes := load(ctx, r, `SELECT id, xid, name, slot_start, at, old_status, new_status, old_fence, new_fence,
		old_owner::text, new_owner::text, old_lease_until, old_generation, new_generation FROM {{schema}}.chaos_history ORDER BY id`,
		func(c *change) []any {
			return []any{&c.id, &c.xid, &c.name, &c.slotStart, &c.at, &c.oldStatus, &c.newStatus, &c.oldFence, &c.newFence,
				&c.oldOwner, &c.newOwner, &c.oldLeaseUntil, &c.oldGen, &c.newGen}
		})

	outside := func(start time.Time) bool { return start.Before(from) || !start.Before(to) }
	byKey := map[slotKey]slotRow{}
	for _, s := range rows {
		k := slotKey{s.name, s.start.UTC()}
		switch {
		case r.sc.byName[s.name].Name() == "" || s.interval != interval:
			rep.fail(k, "row of series %q %s, which nobody asked for", s.name, s.interval)
		case outside(s.start):
			rep.fail(k, "slot outside the requested range [%s, %s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
		default:
			byKey[k] = s
		}
	}
	for _, e := range entries {
		k := slotKey{e.name, e.slotStart.UTC()}
		rep.ledger[k] = append(rep.ledger[k], e)
	}
	for _, e := range effects {
		rep.effectsOf[e.fence] = append(rep.effectsOf[e.fence], e)
	}
	for _, c := range changes {
		k := slotKey{c.name, c.slotStart.UTC()}
		rep.history[k] = append(rep.history[k], c)
	}
	effectsBySlot := map[slotKey][]effect{}
	for _, e := range effects {
		k := slotKey{e.name, e.slotStart.UTC()}
		effectsBySlot[k] = append(effectsBySlot[k], e)
		if outside(e.slotStart) {
			rep.fail(k, "effect (fence %d) outside the requested range", e.fence)
		}
	}
	for k := range rep.ledger {
		if outside(k.start) {
			rep.fail(k, "attempt outside the requested range")
		}
	}

	rep.slots, rep.entries, rep.effects, rep.series = len(byKey), len(entries), len(effects), len(r.sc.series)
	for _, grid := range r.sc.series {
		// Gaps, as the engine sees them.
		c, err := coverage.New(ctx, r.admin, grid, coverage.Options{Schema: r.schema})
		if err != nil {
			t.Fatal(err)
		}
		for g, err := range c.Gaps(ctx, from, to) {
			if err != nil {
				t.Fatal(err)
			}
			rep.fail(slotKey{grid.Name(), g.Start.UTC()}, "gap of %d slot(s) until %s", g.Slots, g.End.UTC().Format(time.RFC3339))
		}
		done := true
		for sl := range grid.Slots(from, to) {
			k := slotKey{grid.Name(), sl.Start.UTC()}
			row, ok := byKey[k]
			if !ok {
				rep.fail(k, "slot missing")
				done = false
				continue
			}
			wantSkip := designatedSkip(grid.Name(), sl.Index)
			switch {
			case row.status == "COMPLETE" && !wantSkip:
				rep.complete++
			case row.status == "SKIP" && wantSkip:
				rep.skipped++
			default:
				rep.fail(k, "ended %s; expected %s", row.status, map[bool]string{true: "SKIP", false: "COMPLETE"}[wantSkip])
				done = false
			}
			if !row.end.Equal(sl.End) {
				rep.fail(k, "slot_end %s; expected %s", row.end.UTC().Format(time.RFC3339), sl.End.UTC().Format(time.RFC3339))
			}
			rep.checkSlot(k, row, effectsBySlot[k])
		}
		if done {
			rep.seriesDone++
		}
	}
	if r.sc.engine {
		maxWork := map[string]time.Duration{}
		for i, s := range r.specs {
			maxWork[s.name] = 10 * r.sc.fleet[i].workMax // the worker's Policy.MaxWork
		}
		rep.checkConcurrency(entries, maxWork)
	}
	for _, e := range entries {
		if e.ended == nil {
			rep.open++
		}
		if e.outcome != nil && *e.outcome == "lost" {
			rep.refused++
		}
		if e.outcome != nil && *e.outcome == "abandon" {
			rep.rolledBack++
		}
	}
	// Every worker got work done, the hostile role's included.
	rep.byWorker = map[string]int{}
	for _, e := range entries {
		if len(rep.effectsOf[e.fence]) > 0 {
			rep.byWorker[e.worker]++
		}
	}
	for _, s := range r.specs {
		if rep.byWorker[s.name] == 0 {
			rep.fail(slotKey{}, "worker %s completed no slot", s.name)
		}
	}
	if r.sc.deps {
		rep.checkUpstream(ctx, r)
		return rep
	}
	// The same count from the suite's side: each re-opened slot once more.
	// (With dependencies, the trigger re-opens slots the suite does not
	// count: the per-slot counts above stand alone.)
	if want := rep.complete + int(r.reopened.Load()); rep.effects != want {
		rep.fail(slotKey{}, "%d effects; expected %d (%d COMPLETE slots + %d re-opened by the suite)",
			rep.effects, want, rep.complete, r.reopened.Load())
	}
	return rep
}

// load runs a query on the round's schema and scans every row.
func load[T any](ctx context.Context, r *round, sql string, dest func(*T) []any) []T {
	rows, err := r.admin.Query(ctx, sqlschema.Render(sql, r.schema))
	if err != nil {
		r.t.Fatal(err)
	}
	var out []T
	var v T
	if _, err := pgx.ForEachRow(rows, dest(&v), func() error { out = append(out, v); return nil }); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// checkConcurrency checks that no job of an engine ran more than one
// worker at a time in a process (Job.Concurrency 1): the attempts one
// process recorded for one series never overlap. A handler records its
// attempt's end before it returns, and the engine starts the job's next
// unit only after, so the check cannot fail while the limit holds. One
// exception: a locked-mode handler that does not return within a grace
// after its MaxWork is abandoned (its transaction with it, see
// acquire.Handler), and the job's worker goes on; so an attempt that
// began at least MaxWork after the one it overlaps is not counted.
func (rep *report) checkConcurrency(entries []entry, maxWork map[string]time.Duration) {
	type job struct {
		pid  int32
		name string
	}
	last := map[job]entry{}
	for _, e := range slices.SortedFunc(slices.Values(entries), func(a, b entry) int { return a.started.Compare(b.started) }) {
		if e.mode == "eject" { // the suite's own holds
			continue
		}
		j := job{e.pid, e.name}
		if prev, ok := last[j]; ok && (prev.ended == nil || e.started.Before(*prev.ended)) && e.started.Sub(prev.started) < maxWork[prev.worker] {
			rep.failFences(slotKey{e.name, e.slotStart.UTC()}, []int64{prev.fence, e.fence},
				"pid %d ran attempt %d (slot %s) while its attempt %d (slot %s) was running: more workers than Job.Concurrency 1",
				e.pid, e.fence, e.slotStart.UTC().Format(time.RFC3339), prev.fence, prev.slotStart.UTC().Format(time.RFC3339))
		}
		last[j] = e
	}
}

// checkSlot checks one slot's history, effects and ledger against each
// other.
func (rep *report) checkSlot(start slotKey, row slotRow, effects []effect) {
	history := rep.history[start]
	entries := rep.ledger[start]
	byXid := map[int64][]effect{}
	for _, e := range effects {
		byXid[e.xid] = append(byXid[e.xid], e)
	}
	entryOf := map[int64]*entry{}
	for i := range entries {
		entryOf[entries[i].fence] = &entries[i]
	}
	accepted := func(fence int64) bool { return len(rep.effectsOf[fence]) > 0 }
	// The suite's ejections take live leases on purpose.
	ejected := func(fence int64) bool { return entryOf[fence] != nil && entryOf[fence].mode == "eject" }

	// The slot's history, in commit order (updates of one row are
	// serialized by its lock, and ids are taken under it).
	generation, done := 0, false
	var lastAccepted int64
	matched := map[int64]bool{} // effect ids paired with a completion
	for _, h := range history {
		if h.newFence < h.oldFence {
			rep.failFences(start, []int64{h.oldFence, h.newFence}, "fence went back from %d to %d (xid %d)", h.oldFence, h.newFence, h.xid)
		}
		if h.oldStatus == "ACQUIRED" && h.oldOwner != nil && h.newFence != h.oldFence && h.oldLeaseUntil != nil && !h.oldLeaseUntil.Before(h.at) &&
			!ejected(h.newFence) {
			rep.failFences(start, []int64{h.oldFence, h.newFence}, "the lease of fence %d, live until %s, was taken by fence %d at %s",
				h.oldFence, stamp(*h.oldLeaseUntil), h.newFence, stamp(h.at))
		}
		if h.oldStatus == "COMPLETE" && h.newStatus != "AVAILABLE" {
			rep.failFences(start, []int64{h.oldFence, h.newFence}, "COMPLETE slot changed to %s with fence %d (xid %d)", h.newStatus, h.newFence, h.xid)
		}
		// A completion on stale input is written as the next
		// generation, AVAILABLE (migration 10): a run that completed.
		staleRun := h.newGen > h.oldGen && h.oldStatus != "COMPLETE" && h.oldStatus != "SKIP"
		if h.newStatus == "COMPLETE" || staleRun {
			es := byXid[h.xid]
			if len(es) != 1 {
				rep.failFences(start, []int64{h.newFence}, "completion with fence %d (xid %d) committed %d effects; expected 1", h.newFence, h.xid, len(es))
			}
			for _, e := range es {
				matched[e.id] = true
				if e.fence != h.newFence {
					rep.failFences(start, []int64{h.newFence, e.fence}, "completion with fence %d committed the effect of fence %d", h.newFence, e.fence)
				}
				if h.oldFence > e.fence {
					rep.failFences(start, []int64{h.oldFence, e.fence}, "write of fence %d accepted after fence %d held the slot: a fenced-out holder's write", e.fence, h.oldFence)
				}
				if en := entryOf[e.fence]; en != nil && en.mode == "lease" &&
					(h.oldStatus != "ACQUIRED" || h.oldFence != e.fence || en.owner == nil || h.oldOwner == nil || *h.oldOwner != *en.owner) {
					rep.failFences(start, []int64{e.fence}, "lease completion with fence %d accepted on a row it did not hold (%s, fence %d, owner %v)",
						e.fence, h.oldStatus, h.oldFence, deref(h.oldOwner))
				}
				if e.fence <= lastAccepted {
					rep.failFences(start, []int64{lastAccepted, e.fence}, "accepted fences do not increase: %d after %d", e.fence, lastAccepted)
				}
				lastAccepted = e.fence
			}
			if done {
				rep.failFences(start, []int64{h.newFence}, "completed twice in generation %d", generation)
			}
			done = true
		}
		if staleRun {
			generation++
			rep.staleRuns++
			done = false
		}
		if h.oldStatus == "COMPLETE" && h.newStatus == "AVAILABLE" {
			generation++
			rep.reopened++
			done = false
		}
	}
	for _, e := range effects {
		if !matched[e.id] {
			rep.failFences(start, []int64{e.fence}, "effect of fence %d (xid %d) committed without completing the slot", e.fence, e.xid)
		}
		if entryOf[e.fence] == nil {
			rep.failFences(start, []int64{e.fence}, "effect of fence %d has no ledger entry for this slot", e.fence)
		}
	}
	if row.status == "COMPLETE" && row.fence != lastAccepted {
		rep.failFences(start, []int64{row.fence, lastAccepted}, "COMPLETE with fence %d, but the last accepted write has fence %d", row.fence, lastAccepted)
	}

	// One effect per generation: every re-open from COMPLETE asks for one
	// more, and a slot that ends COMPLETE has one for its last generation.
	want := generation
	if row.status == "COMPLETE" {
		want++
	}
	rep.expected += want
	switch n := len(effects); {
	case n > want:
		rep.duplicates += n - want
		rep.fail(start, "%d effects over %d generation(s); expected %d: duplicate", n, generation+1, want)
	case n < want:
		rep.missing += want - n
		rep.fail(start, "%d effects over %d generation(s); expected %d: missing", n, generation+1, want)
	}

	// What the workers were told against what was committed.
	for _, en := range entries {
		if en.outcome == nil {
			continue
		}
		switch *en.outcome {
		case "complete":
			if !accepted(en.fence) {
				rep.failFences(start, []int64{en.fence}, "completion acknowledged to %s (fence %d) is not in the database", en.worker, en.fence)
			}
		case "lost", "fail", "park", "skip":
			if accepted(en.fence) {
				rep.failFences(start, []int64{en.fence}, "write reported %q to %s (fence %d) was accepted", *en.outcome, en.worker, en.fence)
			}
		}
	}

	// Overlapping attempts, in acquisition (fence) order.
	for i, a := range entries {
		end := rep.tenureEnd(a, history)
		for _, b := range entries[i+1:] {
			if !b.started.Before(end) {
				continue
			}
			switch {
			case accepted(a.fence) && accepted(b.fence):
				rep.failFences(start, []int64{a.fence, b.fence}, "attempts %d and %d overlapped and both writes were accepted", a.fence, b.fence)
			case accepted(a.fence) && took(history, b.fence):
				rep.failFences(start, []int64{a.fence, b.fence}, "fence %d took the slot while %d was working, and %d's write was still accepted", b.fence, a.fence, a.fence)
			case accepted(a.fence):
				// b's transaction rolled back before its token took effect
				// (a locked-mode takeover of a's expired lease that died):
				// a was never fenced out.
			case a.leaseUntil != nil && a.outcome != nil && *a.outcome == "lost" && b.mode != "eject" && b.started.Before(*a.leaseUntil):
				rep.failFences(start, []int64{a.fence, b.fence}, "attempt %d started at %s, before the lease of %d ran out at %s",
					b.fence, stamp(b.started), a.fence, stamp(*a.leaseUntil))
			default:
				// a was fenced out: refused, killed, frozen, or cut off
				// from its backend; its write was not accepted.
			}
		}
	}
}

// tenureEnd is when attempt a stopped holding the slot as far as anyone
// can tell: its own final write (history), its accepted effect, or the end
// it recorded; never, if its process died holding it.
func (rep *report) tenureEnd(a entry, history []change) time.Time {
	end := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if a.ended != nil {
		end = *a.ended
	}
	for _, e := range rep.effectsOf[a.fence] {
		end = minTime(end, e.writtenAt)
	}
	for _, h := range history {
		if h.newFence == a.fence && h.newStatus != "ACQUIRED" {
			end = minTime(end, h.at)
		}
	}
	return end
}

// took reports whether fence ever took effect on the slot row.
func took(history []change, fence int64) bool {
	return slices.ContainsFunc(history, func(h change) bool { return h.newFence == fence })
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// describe prints up to limit violations with the ledger entries and the
// slot history involved.
func (rep *report) describe(r *round, limit int) string {
	var b strings.Builder
	faultsOf := map[int][]fault{}
	for _, f := range r.faults.all() {
		if f.pid != 0 {
			faultsOf[f.pid] = append(faultsOf[f.pid], f)
		}
	}
	for i, v := range rep.violations {
		if i == limit {
			fmt.Fprintf(&b, "... and %d more violation(s)\n", len(rep.violations)-limit)
			break
		}
		if v.slot == (slotKey{}) {
			fmt.Fprintf(&b, "VIOLATION (seed %d): %s\n", r.seed, v.what)
			continue
		}
		fmt.Fprintf(&b, "VIOLATION (seed %d) slot %s: %s\n", r.seed, v.slot, v.what)
		for _, e := range rep.ledger[v.slot] {
			mark := " "
			if slices.Contains(v.fences, e.fence) {
				mark = "*"
			}
			fmt.Fprintf(&b, "  %s ledger fence %d %s pid %d %s started %s ended %s outcome %v accepted %v",
				mark, e.fence, e.worker, e.pid, e.mode, stamp(e.started), optStamp(e.ended), deref(e.outcome), len(rep.effectsOf[e.fence]) > 0)
			if e.leaseUntil != nil {
				fmt.Fprintf(&b, " lease_until %s", stamp(*e.leaseUntil))
			}
			if e.detail != nil && *e.detail != "" {
				fmt.Fprintf(&b, " detail %q", *e.detail)
			}
			for _, f := range faultsOf[int(e.pid)] {
				fmt.Fprintf(&b, " [%s %s–%s]", f.kind, stamp(f.began), stamp(f.end))
			}
			b.WriteString("\n")
		}
		for _, h := range rep.history[v.slot] {
			fmt.Fprintf(&b, "    history #%d xid %d at %s: %s fence %d owner %v -> %s fence %d owner %v (lease was until %v)\n",
				h.id, h.xid, stamp(h.at), h.oldStatus, h.oldFence, deref(h.oldOwner), h.newStatus, h.newFence, deref(h.newOwner), optStamp(h.oldLeaseUntil))
		}
		for _, e := range rep.ledger[v.slot] {
			for _, ef := range rep.effectsOf[e.fence] {
				fmt.Fprintf(&b, "    effect #%d fence %d xid %d written %s\n", ef.id, ef.fence, ef.xid, stamp(ef.writtenAt))
			}
		}
	}
	return b.String()
}

func optStamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

// summary is the one-screen account of a round.
func (r *round) summary(rep *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos round, seed %d (replay: ALMANAC_CHAOS_SEED=%d)\n", r.seed, r.seed)
	modes := map[string]int{}
	hostile := 0
	for _, w := range r.sc.fleet {
		modes[w.mode]++
		if w.hostile {
			hostile++
		}
	}
	fmt.Fprintf(&b, "  workers:    %d processes (%d locked, %d batch, %d lease; %d as role %s), %d incarnations\n",
		len(r.sc.fleet), modes["locked"], modes["batch"], modes["lease"], hostile, hostileRole, r.fleet.incarnations())
	if r.sc.engine {
		fmt.Fprintf(&b, "              each runs almanac.Client with a job per series (Concurrency %d, each job 1)\n", engineConcurrency)
	}
	count := map[string]int{}
	for _, f := range r.faults.all() {
		count[f.kind]++
	}
	b.WriteString("  faults:    ")
	for _, k := range faultKinds {
		fmt.Fprintf(&b, " %s=%d", k, count[k])
	}
	start := "materializing overlapping pieces"
	if r.sc.engine {
		start = "registering every series and materializing its range"
	}
	fmt.Fprintf(&b, " (+ %d workers %s at start, %d connecting as %s)\n", len(r.sc.fleet), start, hostile, hostileRole)
	fmt.Fprintf(&b, "  series:     %d (%d with every slot done)\n", rep.series, rep.seriesDone)
	fmt.Fprintf(&b, "  slots:      %d (%d COMPLETE, %d SKIP); attempts %d (%d left open by killed workers)\n",
		rep.slots, rep.complete, rep.skipped, rep.entries, rep.open)
	fmt.Fprintf(&b, "  effects:    %d (expected %d; %d re-opened slots done again), duplicates %d, missing %d\n",
		rep.effects, rep.expected, rep.reopened, rep.duplicates, rep.missing)
	if r.sc.deps {
		fmt.Fprintf(&b, "  upstream:   %d upstream slots re-opened and done again; %d runs on stale input re-run as the next generation\n",
			r.upstreamReopened.Load(), rep.staleRuns)
	}
	b.WriteString("  completed: ")
	for _, s := range r.specs {
		fmt.Fprintf(&b, " %s=%d", s.name, rep.byWorker[s.name])
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  refused:    %d stale lease writes refused (lease lost), %d locked attempts rolled back with their session\n",
		rep.refused, rep.rolledBack)
	fmt.Fprintf(&b, "  time:       drained %s after the last fault (bound %s), round %s\n",
		rep.drain.Round(time.Millisecond), drainBound, rep.total.Round(time.Second))
	fmt.Fprintf(&b, "  violations: %d\n", len(rep.violations))
	b.WriteString(r.describeFaults())
	return b.String()
}
