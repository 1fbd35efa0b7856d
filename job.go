package almanac

import (
	"errors"
	"fmt"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/schedule"
	"github.com/almanacdev/almanac/slot"
)

// Job is a series, a handler, a trigger and the policies for its slots.
// Only Series and a handler are required; every other field has a default,
// stated with it. The handler says how the job holds its slots: a Handler
// in locked mode, a LeaseHandler in lease mode.
//
//	client.Register(almanac.Job{
//		Series:  series,
//		Handler: report,
//		Policy:  almanac.Policy{Lag: time.Minute, MaxAttempts: 5},
//	})
type Job struct {
	// Series is the grid of slots the job covers (from Client.Series); it
	// is registered when the client starts, if it is not yet.
	Series Series
	// Handler does the work of each slot in locked mode: the slot is held
	// by an open transaction, and what the handler writes there commits
	// with the slot's outcome. For work of seconds to minutes (see
	// Policy.MaxWork).
	Handler Handler
	// LeaseHandler does the work of each slot in lease mode instead: the
	// slot is claimed with a committed lease that a heartbeat renews, for
	// long work, work that must not hold a connection, and poolers in
	// transaction mode. A job has a Handler or a LeaseHandler, not both.
	LeaseHandler LeaseHandler

	// Schedule is a cron spec (five fields, @hourly, @every 5m, with an
	// optional CRON_TZ=<zone> prefix, firing at least once in ten years) on
	// which due slots are materialized. Default: whenever the next slot
	// becomes due (its end plus Policy.Lag, on the database clock).
	Schedule string
	// CatchUp is the policy for slots missed while no worker ran (downtime,
	// or a series started in the past). Default CatchUpAll.
	CatchUp CatchUp
	// From and To, when set, bound the job to the slots starting in
	// [From, To): only those are materialized, worked and drained (a
	// backfill of a fixed range). Default: from the series' earliest stored
	// slot (for a series with none, the most recently due one), without
	// end.
	From, To time.Time
	// LookBack is the window the periodic sweep (every ten minutes)
	// re-materializes, so that a deleted row or a series created late is
	// noticed. Default the larger of 24 hours and 10 intervals.
	LookBack time.Duration

	// Batch, above 1, makes a locked-mode job lock up to Batch slots per
	// transaction, each handler in a savepoint, and record their outcomes
	// with one statement: the throughput path for short handlers (100 is
	// a good size). Default 1: one slot per transaction. Lease-mode jobs
	// ignore it.
	//
	// Batched jobs of different series with work at the same time also
	// share transactions: a job picked for a worker takes up to Batch-1
	// other batched jobs with the same NewestFirst, DeadMan and MaxWork
	// along, and the first acquirable slot of each series is locked by one
	// statement and worked in one transaction (acquire.RunAcross), each
	// handler in its own savepoint, as within a batch. So many series that
	// each have a slot due at a boundary cost a transaction per Batch
	// series, not one each. Each job counts a worker of its own
	// (Concurrency holds), the transaction one of Options.Concurrency. A
	// paused series gives nothing; a series with a cap, or an expired
	// lease to take over, is worked alone.
	Batch int
	// Concurrency caps this job's workers. Default: Options.Concurrency.
	Concurrency int
	// Priority orders jobs that compete for workers: higher first. Among
	// jobs of equal priority, the one with fewer running workers goes
	// first, so that one slow job cannot keep another's slots waiting.
	// Default 0.
	Priority int

	// Policy is how the job's slots are taken, held and retried: Lag
	// (which must not be negative for a job), NewestFirst, MaxWork and
	// DeadMan (locked modes), LeaseTTL, StopBefore and TakeoverGrace (lease
	// mode), Retry and MaxAttempts. Its fields are documented, with their
	// defaults, at Policy.
	Policy
}

// Policy is how a job's slots are taken, held and retried: when a slot is
// due (Lag), in which order (NewestFirst), for how long a handler may hold
// it (MaxWork, DeadMan, LeaseTTL, StopBefore, TakeoverGrace), and what a
// failure costs (Retry, MaxAttempts). The zero value is usable. Its fields
// and their defaults are documented at acquire.Policy: the same settings
// configure a custom claim loop.
type Policy = acquire.Policy

// mode is how a job holds its slots, as its handler says.
type mode int

const (
	modeLocked mode = iota // a Handler, one slot per transaction
	modeBatch              // a Handler and a Batch above 1
	modeLease              // a LeaseHandler
)

// String names the mode in the log.
func (m mode) String() string {
	switch m {
	case modeBatch:
		return "batch"
	case modeLease:
		return "lease"
	}
	return "locked"
}

// mode returns the job's mode.
func (j *Job) mode() mode {
	switch {
	case j.LeaseHandler != nil:
		return modeLease
	case j.Batch > 1:
		return modeBatch
	}
	return modeLocked
}

// validate reports what is wrong with the job before it is registered: no
// series, no handler or two, a negative lag, a cron spec that is malformed
// or never fires. Errors wrap ErrInvalid.
func (j *Job) validate() error {
	var errs []error
	if j.Series.Interval().IsZero() {
		errs = append(errs, errors.New("job has no series"))
	}
	switch {
	case j.Handler == nil && j.LeaseHandler == nil:
		errs = append(errs, errors.New("job has no Handler (locked mode) or LeaseHandler (lease mode)"))
	case j.Handler != nil && j.LeaseHandler != nil:
		errs = append(errs, errors.New("job has both a Handler and a LeaseHandler; give the one of its mode"))
	}
	if j.Lag < 0 {
		errs = append(errs, fmt.Errorf("negative lag %s", j.Lag))
	}
	if j.Schedule != "" {
		if _, err := schedule.Parse(j.Schedule); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: job %s: %w", slot.ErrInvalid, j.Series.Name(), err)
	}
	return nil
}

// key identifies a job's series in wake-up events.
type key struct{ name, interval string }

func (j *Job) key() key { return key{j.Series.Name(), j.Series.Interval().String()} }
