package almanac

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// IncompleteError says which slots of a Drain's scope were left
// unfinished, by state: the error Drain returns, wrapping ErrIncomplete
// (and, when ctx ended first, ctx's error).
type IncompleteError struct {
	// Failed counts slots that wait for a retry (they failed, or their
	// handler snoozed), Parked the ones that gave up: both are reported,
	// not waited for.
	Failed, Parked int64
	// Ready counts slots that could have been worked, Held those that other
	// workers held: both are left only when the context ended first, or,
	// for Ready, when the series is paused (see Client.Pause).
	Ready, Held int64
	// Cause is why Drain stopped waiting: the context's error, or nil.
	Cause error
}

// left is the number of unfinished slots.
func (e *IncompleteError) left() int64 { return e.Failed + e.Parked + e.Ready + e.Held }

// Error says how many slots are left and why: "3 slots left unfinished: 2
// failed or snoozed, waiting for their retry, 1 parked after their last
// attempt".
func (e *IncompleteError) Error() string {
	var parts []string
	for _, p := range []struct {
		n         int64
		one, many string
	}{{e.Failed, "failed or snoozed, waiting for its retry", "failed or snoozed, waiting for their retry"},
		{e.Parked, "parked after its last attempt", "parked after their last attempt"},
		{e.Ready, "not run yet", "not run yet"}, {e.Held, "held by another worker", "held by other workers"}} {
		switch {
		case p.n == 1:
			parts = append(parts, "1 "+p.one)
		case p.n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.many))
		}
	}
	slots := "slots"
	if e.left() == 1 {
		slots = "slot"
	}
	msg := fmt.Sprintf("%d %s left unfinished: %s", e.left(), slots, strings.Join(parts, ", "))
	if e.Cause != nil {
		msg += " (stopped: " + e.Cause.Error() + ")"
	}
	return msg
}

// Unwrap returns ErrIncomplete and, when ctx ended the drain, its error.
func (e *IncompleteError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrIncomplete, e.Cause}
	}
	return []error{ErrIncomplete}
}

// Summary counts the outcomes of the slots a Drain ran.
type Summary struct {
	// Completed slots are COMPLETE, with the handler's writes; Skipped ones
	// SKIP.
	Completed, Skipped int
	// Snoozed slots are AVAILABLE again after their snooze; Failed ones
	// after their retry delay (a handler's error); Parked ones gave up
	// (Policy.MaxAttempts, or the retry policy) and stay visible until
	// re-opened or retried.
	Snoozed, Failed, Parked int
	// Abandoned runs recorded nothing (a shutdown, a lost connection) and
	// their slots are acquirable again at once.
	Abandoned int
}

// add counts one outcome.
func (s *Summary) add(o acquire.Outcome) {
	switch o {
	case acquire.Completed:
		s.Completed++
	case acquire.Skipped:
		s.Skipped++
	case acquire.Snoozed:
		s.Snoozed++
	case acquire.Failed:
		s.Failed++
	case acquire.Parked:
		s.Parked++
	case acquire.Abandoned:
		s.Abandoned++
	}
}

// drain is Client.Drain: it materializes what is due and works the jobs'
// slots until every slot in scope is finished or has been given its
// chance, then returns the outcomes it saw.
//
// The scope of a job is its slots from its first one (Job.From, else the
// earliest stored) to the last one due when drain started (or Job.To). It
// keeps working while any slot of the scope can be worked: it is
// acquirable, its lease expired (it is taken over), or another worker holds
// it (it waits for that worker to finish or for its lease to expire). A
// fault (a lost connection, a restarting server) is never taken for the end
// of the work. A slot that fails is retried within the run when its retry
// comes within a few seconds (the first retries of the default policy); it
// stops waiting for slots in a longer backoff, and for parked ones.
func (e *engine) drain(ctx context.Context) (Summary, error) {
	if err := e.prepare(ctx); err != nil {
		return Summary{}, err
	}
	var mu sync.Mutex
	var summary Summary
	var results atomic.Int64
	onResult := e.onResult
	e.onResult = func(j *job, r acquire.Result) {
		mu.Lock()
		summary.add(r.Outcome)
		mu.Unlock()
		results.Add(1)
		if onResult != nil {
			onResult(j, r)
		}
	}
	copySummary := func() Summary {
		mu.Lock()
		defer mu.Unlock()
		return summary
	}
	now, err := e.dbNow(ctx)
	if err != nil {
		return Summary{}, err
	}
	scopes := make([]scope, len(e.jobs))
	for i, j := range e.jobs {
		if err := e.materialize(ctx, j, j.start, now); err != nil {
			return Summary{}, err
		}
		to, err := dueTo(j.Series, j.Lag, now)
		if err != nil {
			return Summary{}, err
		}
		if !j.To.IsZero() && j.To.Before(to) {
			to = j.To
		}
		scopes[i] = scope{job: j, from: j.start, to: to}
	}

	stopObserving := e.observeWorkers()
	defer stopObserving()
	defer e.logStopped(context.WithoutCancel(ctx))
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var workers sync.WaitGroup
	var left scopeState
	e.wakeAll() // every job looks at its range at least once
	for {
		before := results.Load()
		e.dispatch(ctx, work, &workers, true)
		if ctx.Err() != nil {
			break
		}
		if left, err = e.scopesState(ctx, scopes); err != nil {
			break
		}
		if left.ready+left.expired+left.held+left.soon == 0 {
			break
		}
		if left.held+left.soon > 0 || results.Load() == before {
			// Slots another worker holds, slots whose retry comes soon, or
			// slots that were ready but locked by another worker when looked
			// for: look again shortly, or when the first of them is due.
			wait := min(e.opts.PollInterval, time.Second)
			if left.next > 0 {
				wait = min(wait, left.next)
			}
			select {
			case <-ctx.Done():
			case <-e.opts.Clock.After(wait):
			}
		}
		e.wakeAll()
	}

	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-e.opts.Clock.After(e.opts.ShutdownTimeout):
		stopWork()
		<-finished
	}
	if err != nil && ctx.Err() == nil {
		return copySummary(), err
	}
	if ctx.Err() != nil {
		// Count what is left on a context of our own: the caller's is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		state, serr := e.scopesState(cctx, scopes)
		cancel()
		if serr != nil {
			return copySummary(), fmt.Errorf("%w: %w", ErrIncomplete, ctx.Err())
		}
		left, err = state, ctx.Err()
	}
	if left.open() == 0 {
		return copySummary(), nil
	}
	return copySummary(), &IncompleteError{Failed: left.soon + left.backoff, Parked: left.parked,
		Ready: left.ready + left.expired + left.paused, Held: left.held, Cause: err}
}

// scope is the range of one job's slots a drain covers.
type scope struct {
	job      *job
	from, to time.Time
}

// scopeState counts the unfinished slots of drain scopes by what a drain
// does about them: it works ready and expired ones, waits for held ones and
// for soon ones (their retry comes within drainRetryWait), and leaves the
// ones in a longer backoff and the parked ones.
type scopeState struct {
	ready, expired, held, soon, backoff, parked int64
	// paused counts the slots that would be ready or expired but for the
	// series being paused, or for upstream slots not done yet: not waited
	// for, left undone.
	paused int64
	// next is the time until the first held lease runs out or the first
	// soon retry comes (database clock), 0 if none.
	next time.Duration
}

func (st scopeState) open() int64 {
	return st.ready + st.expired + st.held + st.soon + st.backoff + st.parked + st.paused
}

// drainRetryWait is how far ahead a drain waits for a failed slot's retry:
// a slot that failed once or twice (the default policy waits 1 s, then 2 s,
// then 4 s) gets its retries within the run, one that keeps failing is
// reported rather than waited for for an hour.
const drainRetryWait = 5 * time.Second

// scopeSQL counts the open slots of one scope [$3, $4) ($3 before $4): only
// AVAILABLE and ACQUIRED rows are read, each kind from its partial index,
// so it costs what is left, not the size of the range. ready uses the
// claim's own test of due-ness; soon counts the slots whose retry comes
// within $6 microseconds. The two kinds are read apart, and the ACQUIRED
// ones tested for the range by containment, because one scan of both (status
// IN (...)) was planned as a scan of the whole range: through the primary
// key when the plan was generic, of the whole table when it was not.
// TestDrainCountsOnlyOpenSlots counts the rows read.
const scopeSQL = `WITH now_ AS MATERIALIZED (SELECT clock_timestamp() AS t, clock_timestamp() + $6 * interval '1 microsecond' AS soon,
    EXISTS (SELECT FROM {{schema}}.series c WHERE c.name = $1 AND c."interval" = $2 AND c.paused_at IS NOT NULL) AS paused)
SELECT
    count(*) FILTER (WHERE status = 'AVAILABLE' AND (not_before IS NULL OR not_before <= t)
        AND slot_end <= t - greatest($5 * interval '1 microsecond',
            (SELECT c.lag FROM {{schema}}.series c WHERE c.name = $1 AND c."interval" = $2))
        AND NOT paused AND upstream_done),
    count(*) FILTER (WHERE status = 'ACQUIRED' AND lease_until < t AND NOT paused),
    count(*) FILTER (WHERE status = 'ACQUIRED' AND lease_until >= t),
    count(*) FILTER (WHERE status = 'AVAILABLE' AND not_before > t AND not_before <= soon),
    count(*) FILTER (WHERE status = 'AVAILABLE' AND not_before > soon AND not_before <> 'infinity'),
    count(*) FILTER (WHERE status = 'AVAILABLE' AND not_before = 'infinity'),
    coalesce(extract(epoch FROM least(
        min(lease_until - t) FILTER (WHERE status = 'ACQUIRED' AND lease_until >= t),
        min(not_before - t) FILTER (WHERE status = 'AVAILABLE' AND not_before > t AND not_before <= soon))), 0),
    count(*) FILTER (WHERE paused AND (status = 'ACQUIRED' AND lease_until < t
        OR status = 'AVAILABLE' AND (not_before IS NULL OR not_before <= t))
        OR NOT paused AND NOT upstream_done AND status = 'AVAILABLE' AND (not_before IS NULL OR not_before <= t))
FROM (SELECT status, slot_end, not_before, lease_until, NOT EXISTS (SELECT FROM {{schema}}.series_dependency d
            WHERE d.name = $1 AND d."interval" = $2 AND NOT {{schema}}.upstream_done(d.up_name, d.up_interval, slot_start, slot_end)) AS upstream_done
        FROM {{schema}}.slot
        WHERE name = $1 AND "interval" = $2 AND status = 'AVAILABLE' AND slot_start >= $3 AND slot_start < $4
    UNION ALL
    SELECT status, slot_end, not_before, lease_until, true FROM {{schema}}.slot
        WHERE name = $1 AND "interval" = $2 AND status = 'ACQUIRED' AND tstzrange($3, $4) @> slot_start) s, now_`

// scopesState adds up the state of every scope. Not-due AVAILABLE slots
// (a negative range, or slots materialized early by another process) count
// as ready only once due.
func (e *engine) scopesState(ctx context.Context, scopes []scope) (scopeState, error) {
	var total scopeState
	sql := sqlschema.Render(scopeSQL, e.opts.Schema)
	for _, sc := range scopes {
		if !sc.from.Before(sc.to) {
			continue
		}
		var st scopeState
		var next float64
		err := retry.Do(ctx, func(ctx context.Context) error {
			return e.pool.QueryRow(ctx, sql, sc.job.Series.Name(), sc.job.Series.Interval().String(), sc.from, sc.to,
				sc.job.Lag.Microseconds(), drainRetryWait.Microseconds()).Scan(&st.ready, &st.expired, &st.held, &st.soon, &st.backoff, &st.parked, &next, &st.paused)
		})
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return scopeState{}, err
		}
		total.ready += st.ready
		total.expired += st.expired
		total.held += st.held
		total.soon += st.soon
		total.backoff += st.backoff
		total.parked += st.parked
		total.paused += st.paused
		if d := time.Duration(next * float64(time.Second)); d > 0 && (total.next == 0 || d < total.next) {
			total.next = d
		}
	}
	return total, nil
}
