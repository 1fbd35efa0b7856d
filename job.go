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
// stated with it.
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
	// Mode is how slots are held: ModeLocked (the default), ModeLockedBatch
	// or ModeLease.
	Mode Mode
	// Handler runs the slots of ModeLocked and ModeLockedBatch jobs.
	Handler Handler
	// LeaseHandler runs the slots of ModeLease jobs.
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

	// Batch is the number of slots a ModeLockedBatch transaction takes.
	// Default 100.
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

// Mode is how a job holds its slots.
type Mode int

// The modes of a job.
const (
	// ModeLocked holds each slot in an open transaction, one slot per
	// transaction; the handler's writes commit with COMPLETE. The default,
	// for work of seconds to minutes.
	ModeLocked Mode = iota
	// ModeLockedBatch locks up to Job.Batch slots per transaction, each
	// handler in a savepoint: the throughput path for short handlers.
	ModeLockedBatch
	// ModeLease claims each slot with a committed, heart-beaten lease: for
	// long work, work that must not hold a connection, and poolers in
	// transaction mode.
	ModeLease
)

// String returns "locked", "batch" or "lease".
func (m Mode) String() string {
	switch m {
	case ModeLocked:
		return "locked"
	case ModeLockedBatch:
		return "batch"
	case ModeLease:
		return "lease"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// validate reports what is wrong with the job before it is registered: no
// series, no handler for its mode, a negative lag, a cron spec that is
// malformed or never fires. Errors wrap ErrInvalid.
func (j *Job) validate() error {
	var errs []error
	if j.Series.Interval().IsZero() {
		errs = append(errs, errors.New("job has no series"))
	}
	switch j.Mode {
	case ModeLocked, ModeLockedBatch:
		if j.Handler == nil {
			errs = append(errs, fmt.Errorf("%s mode needs Handler", j.Mode))
		}
	case ModeLease:
		if j.LeaseHandler == nil {
			errs = append(errs, errors.New("lease mode needs LeaseHandler"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown mode %d", j.Mode))
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
