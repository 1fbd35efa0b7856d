package almanac

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/wake"
	"github.com/almanacdev/almanac/slot"
)

// group is the jobs whose triggers fire together: the same grid (interval,
// zone, origin), lag, schedule, look-back and catch-up policy. One
// goroutine runs a group's trigger and sweep, and each tick materializes
// the newly due slots of all its series with one transaction per
// groupChunk series, not one per series.
type group struct {
	jobs     []*job
	grid     slot.Series // the first job's: the grid computations ignore the name
	trigger  trigger
	lookBack time.Duration
	catchUp  CatchUp
}

// groupKey is what the jobs of one group share.
type groupKey struct {
	interval, zone string
	origin         int64 // microseconds since the epoch
	lag, lookBack  time.Duration
	schedule       string
	catchUp        CatchUp
}

// groupChunk bounds the series one grouped write locks and inserts in one
// transaction, and one sweep counts in one statement: the size of the
// arrays sent, and how long one transaction holds the writers' lock of
// its series.
const groupChunk = 500

// groupMaxSlots bounds the slots per series a tick writes in bulk: a longer
// range (a process that was stopped, a long outage) goes through the
// series' own Materialize, which finds the gaps first and applies the
// catch-up policy.
const groupMaxSlots = 64

// groups returns the engine's jobs grouped by what their triggers share,
// in the order of their first job.
func (e *engine) groups() []*group {
	byKey := map[groupKey]*group{}
	var out []*group
	for _, j := range e.jobs {
		k := groupKey{interval: j.Series.Interval().String(), zone: j.Series.Location().String(),
			origin: j.Series.Origin().UnixMicro(), lag: j.Lag, lookBack: j.LookBack, schedule: j.Schedule, catchUp: j.CatchUp}
		g := byKey[k]
		if g == nil {
			g = &group{grid: j.Series, trigger: j.trigger, lookBack: j.LookBack, catchUp: j.CatchUp}
			byKey[k] = g
			out = append(out, g)
		}
		g.jobs = append(g.jobs, j)
	}
	return out
}

// driveGroup runs a group's trigger and sweep until ctx is done: a
// catch-up over each job's whole range first, then newly due slots at
// every trigger, and the look-back window every sweep interval. What is
// due, and when a trigger fires, is reckoned on the database clock (read
// once per trigger for the whole group); the scheduler's Clock only times
// the waits in between, so a host whose clock is wrong neither runs slots
// early nor misses them.
func (e *engine) driveGroup(ctx context.Context, g *group) {
	if now, err := e.dbNow(ctx); err == nil {
		e.catchUpGroup(ctx, g, now)
	}
	lastSweep := e.opts.Clock.Now()
	for ctx.Err() == nil {
		now, err := e.dbNow(ctx)
		if err != nil {
			continue // only when ctx is done: dbNow retries faults until then
		}
		next, err := g.trigger.next(now)
		if err != nil {
			e.opts.Logger.Error("almanac: trigger stopped", "interval", g.grid.Interval().String(), "jobs", len(g.jobs), "error", err)
			return
		}
		wait := next.Sub(now)
		if sweep := lastSweep.Add(e.sweep).Sub(e.opts.Clock.Now()); sweep < wait {
			wait = max(sweep, 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.opts.Clock.After(wait):
		}
		if now, err = e.dbNow(ctx); err != nil {
			return
		}
		if e.opts.Clock.Now().Sub(lastSweep) < e.sweep {
			e.tickGroup(ctx, g, now)
			continue
		}
		lastSweep = e.opts.Clock.Now()
		e.sweepGroup(ctx, g, now)
	}
}

// catchUpGroup materializes each job's due slots from its first slot,
// applying its catch-up policy: in bulk for the jobs that miss at most a
// few slots since their first (a series new to this process), through the
// series' own Materialize for the others.
func (e *engine) catchUpGroup(ctx context.Context, g *group, now time.Time) {
	e.materializeGroup(ctx, g, now, func(j *job) time.Time { return j.start })
}

// eachJob calls fn for each job, four at a time, and returns when all are
// done or ctx is.
func (e *engine) eachJob(ctx context.Context, jobs []*job, fn func(*job)) {
	var wg sync.WaitGroup
	next := make(chan *job)
	for range min(4, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				fn(j)
			}
		})
	}
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}

// span is a range of slots some jobs of a group need written.
type span struct{ from, to time.Time }

// tickGroup materializes the slots of the group's jobs that became due
// since each was last covered (within its look-back).
func (e *engine) tickGroup(ctx context.Context, g *group, now time.Time) {
	e.materializeGroup(ctx, g, now, func(j *job) time.Time { return maxTime(j.covered, now.Add(-j.LookBack)) })
}

// materializeGroup materializes the due slots of the group's jobs from
// where from says (called with e.mu held): jobs needing the same range
// share one statement per groupChunk series. A job whose range is long, or
// whose catch-up policy would skip part of it, goes through its own
// materialize instead, a few at a time.
func (e *engine) materializeGroup(ctx context.Context, g *group, now time.Time, from func(*job) time.Time) {
	due, err := dueTo(g.grid, g.trigger.lag, now)
	if err != nil {
		e.opts.Logger.Error("almanac: materialize failed", "interval", g.grid.Interval().String(), "error", err)
		return
	}
	spans := map[span][]*job{}
	starts := map[*job]time.Time{}
	e.mu.Lock()
	for _, j := range g.jobs {
		s := span{from: maxTime(from(j), j.start), to: due}
		if !j.To.IsZero() && j.To.Before(s.to) {
			s.to = j.To
		}
		if s.from.Before(s.to) {
			spans[s] = append(spans[s], j)
			starts[j] = s.from
		}
	}
	e.mu.Unlock()
	var alone []*job
	for s, jobs := range spans {
		n, err := g.grid.Count(s.from, s.to)
		skipBefore, perr := catchUpPlan(g.catchUp, g.grid, s.from, s.to)
		if err != nil || perr != nil || n > groupMaxSlots || skipBefore.After(s.from) {
			alone = append(alone, jobs...)
			continue
		}
		if err := e.materializeMany(ctx, g.grid, s, jobs); err != nil && ctx.Err() == nil {
			e.opts.Logger.Error("almanac: materialize failed", "interval", g.grid.Interval().String(), "series", len(jobs), "error", err)
		}
	}
	e.eachJob(ctx, alone, func(j *job) {
		if err := e.materialize(ctx, j, starts[j], now); err != nil && ctx.Err() == nil {
			e.opts.Logger.Error("almanac: materialize failed", j.logArgs("error", err)...)
		}
	})
}

// lockWritersSQL takes the writers' lock of the series named in $1 of
// interval $2: their rows in the series table, FOR NO KEY UPDATE, in name
// order, so that two grouped inserts never wait for each other in a cycle
// (coverage's writers lock one series at a time). It returns how many it
// locked: a series deleted meanwhile is missing, and its slots are not
// inserted (insertManySQL joins the series).
const lockWritersSQL = `SELECT count(*) FROM (
    SELECT FROM {{schema}}.series
    WHERE (name, "interval") IN (SELECT n, $2 FROM unnest($1::text[]) AS n)
    ORDER BY name FOR NO KEY UPDATE) AS locked`

// insertManySQL inserts the slots ($3 starts, $4 ends) of every series
// named in $1, of interval $2, still registered, that are missing and not
// compacted, as AVAILABLE, and returns the names of the series it inserted
// slots of. It runs under the series' writers' lock (lockWritersSQL), so no
// Compact deletes a finished slot of these series meanwhile (which the
// insert would then bring back), and ON CONFLICT DO NOTHING leaves the
// slots that exist as they are.
const insertManySQL = `WITH want AS (
    SELECT n.name, t.s AS slot_start, t.e AS slot_end
    FROM unnest($1::text[]) AS n(name) CROSS JOIN unnest($3::timestamptz[], $4::timestamptz[]) AS t(s, e)
    WHERE EXISTS (SELECT FROM {{schema}}.series AS r WHERE r.name = n.name AND r."interval" = $2)
),
ins AS (
    INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end)
    SELECT w.name, $2, w.slot_start, w.slot_end FROM want AS w
    WHERE NOT EXISTS (SELECT FROM {{schema}}.slot_compacted AS c
        WHERE c.name = w.name AND c."interval" = $2 AND c.range_start <= w.slot_start AND c.range_end > w.slot_start)
    ON CONFLICT DO NOTHING
    RETURNING name
)
SELECT DISTINCT name FROM ins`

// materializeMany inserts the missing slots of s for every job of jobs (one
// grid), groupChunk series per transaction, notifies once per transaction
// that inserted any (a notification naming no series, for the interval:
// other processes' listeners scan for work), and wakes the jobs it inserted
// slots for.
func (e *engine) materializeMany(ctx context.Context, grid slot.Series, s span, jobs []*job) error {
	var starts, ends []time.Time
	for sl := range grid.Slots(s.from, s.to) {
		starts, ends = append(starts, sl.Start), append(ends, sl.End)
	}
	interval := grid.Interval().String()
	lock := sqlschema.Render(lockWritersSQL, e.opts.Schema)
	insert := sqlschema.Render(insertManySQL, e.opts.Schema)
	for chunk := range slices.Chunk(jobs, groupChunk) {
		names := make([]string, len(chunk))
		for i, j := range chunk {
			names[i] = j.Series.Name()
		}
		var inserted []string
		err := retry.Do(ctx, func(ctx context.Context) error {
			inserted = inserted[:0]
			return pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, lock, names, interval); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, insert, names, interval, starts, ends)
				if err != nil {
					return err
				}
				var name string
				if _, err := pgx.ForEachRow(rows, []any{&name}, func() error {
					inserted = append(inserted, name)
					return nil
				}); err != nil {
					return err
				}
				if len(inserted) == 0 {
					return nil
				}
				return wake.Notify(ctx, tx, e.opts.Schema, wake.Event{Interval: interval, Reason: "materialize"})
			})
		})
		if err != nil {
			return fmt.Errorf("scheduler: materialize %d series of %s: %w", len(chunk), interval, err)
		}
		e.mu.Lock()
		for _, j := range chunk {
			if s.to.After(j.covered) {
				j.covered = s.to
			}
		}
		e.mu.Unlock()
		woken := make([]*job, 0, len(inserted))
		for _, name := range inserted {
			if j := e.byKey[key{name, interval}]; j != nil {
				woken = append(woken, j)
			}
		}
		e.wakeMany(woken)
	}
	return nil
}

// sweepCountSQL returns the series named in $1, of interval $2, that have
// fewer than $5 slots stored in [$3, $4): those a sweep re-materializes.
// One statement for the group, reading each series' primary key over the
// window.
const sweepCountSQL = `SELECT n.name FROM unnest($1::text[]) AS n(name)
WHERE (SELECT count(*) FROM {{schema}}.slot AS s
    WHERE s.name = n.name AND s."interval" = $2 AND s.slot_start >= $3 AND s.slot_start < $4) < $5`

// sweepGroup re-materializes the look-back window of the group's jobs whose
// window misses slots (a deleted row, a series created late), found with
// one statement per groupChunk series; the others cost nothing more. A
// series with compacted slots in its window is always looked at again, by
// its own materialize.
func (e *engine) sweepGroup(ctx context.Context, g *group, now time.Time) {
	// The slots due since the last tick first, so that they do not count
	// as missing.
	e.tickGroup(ctx, g, now)
	due, err := dueTo(g.grid, g.trigger.lag, now)
	if err != nil {
		return
	}
	spans := map[span][]*job{}
	for _, j := range g.jobs {
		s := span{from: maxTime(now.Add(-j.LookBack), j.start), to: due}
		if !j.To.IsZero() && j.To.Before(s.to) {
			s.to = j.To
		}
		if s.from.Before(s.to) {
			spans[s] = append(spans[s], j)
		}
	}
	interval := g.grid.Interval().String()
	count := sqlschema.Render(sweepCountSQL, e.opts.Schema)
	var short []*job
	for s, jobs := range spans {
		from, err := g.grid.Floor(s.from)
		if err != nil {
			continue
		}
		lo := from.Start
		if lo.Before(s.from) {
			lo = from.End
		}
		want, err := g.grid.Count(lo, s.to)
		if err != nil || want == 0 {
			continue
		}
		for chunk := range slices.Chunk(jobs, groupChunk) {
			names := make([]string, len(chunk))
			for i, j := range chunk {
				names[i] = j.Series.Name()
			}
			var missing []string
			err := retry.Do(ctx, func(ctx context.Context) error {
				missing = missing[:0]
				rows, err := e.pool.Query(ctx, count, names, interval, lo, s.to, want)
				if err != nil {
					return err
				}
				var name string
				_, err = pgx.ForEachRow(rows, []any{&name}, func() error {
					missing = append(missing, name)
					return nil
				})
				return err
			})
			if err != nil {
				if ctx.Err() == nil {
					e.opts.Logger.Error("almanac: sweep failed", "interval", interval, "series", len(chunk), "error", err)
				}
				continue
			}
			for _, name := range missing {
				if j := e.byKey[key{name, interval}]; j != nil {
					short = append(short, j)
				}
			}
		}
	}
	e.eachJob(ctx, short, func(j *job) {
		if err := e.materialize(ctx, j, now.Add(-j.LookBack), now); err != nil && ctx.Err() == nil {
			e.opts.Logger.Error("almanac: materialize failed", j.logArgs("error", err)...)
		}
	})
}
