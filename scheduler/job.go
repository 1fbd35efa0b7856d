package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/slot"
)

// Mode is how a job holds its slots (see package acquire).
type Mode int

const (
	// Locked holds each slot in an open transaction, one slot per
	// transaction; the handler's writes commit with COMPLETE.
	Locked Mode = iota
	// LockedBatch locks up to Job.Batch slots per transaction: the
	// throughput path for short handlers.
	LockedBatch
	// Lease claims each slot with a committed, heart-beaten lease: for long
	// work and for work that must not hold a connection.
	Lease
)

func (m Mode) String() string {
	switch m {
	case Locked:
		return "locked"
	case LockedBatch:
		return "batch"
	case Lease:
		return "lease"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// LeaseHandler does the work of one slot in lease mode. It returns nil to
// complete the slot (unless it completed it itself, for instance with
// Lease.CompleteTx to commit its own writes with the completion),
// acquire.Skip or acquire.Snooze, or an error to record a failure. Its
// context is cancelled when the lease is lost or the scheduler's shutdown
// timeout passes; the lease is then released with its checkpoint.
type LeaseHandler func(ctx context.Context, l *acquire.Lease) error

// Job is a series, a handler, a trigger and policies.
type Job struct {
	// Series is the grid of slots the job covers; it is registered if it
	// is not yet (and must match if it is).
	Series slot.Series

	// Schedule is a cron spec (five fields, @hourly, @every 5m, with an
	// optional CRON_TZ=<zone> prefix) on which the job materializes its due
	// slots. Empty: whenever the next slot becomes due.
	Schedule string
	// Lag is how long after a slot ends it becomes due (slot_end + lag <=
	// now), to absorb late data: "the five-minute window that began six
	// minutes ago" is a PT5M series with a one-minute lag.
	Lag time.Duration
	// CatchUp is the policy for slots missed during downtime. Default all.
	CatchUp CatchUp
	// Start, if set, bounds the job: only slots starting at or after it are
	// materialized and acquired. Zero: the job covers the series from its
	// earliest stored slot, or, for a series with none, from the most
	// recently due slot, and acquires any open slot.
	Start time.Time
	// End, if set, bounds the job: only slots starting before it are
	// materialized and acquired (a backfill of a fixed range).
	End time.Time
	// LookBack is the window the periodic gap sweep re-materializes (a
	// deleted row, a series created late). Default the larger of 24 hours
	// and 10 intervals.
	LookBack time.Duration

	// Mode is how slots are held. Default Locked.
	Mode Mode
	// Batch is the LockedBatch size. Default 100.
	Batch int
	// Handler runs the slots of Locked and LockedBatch jobs.
	Handler acquire.Handler
	// LeaseHandler runs the slots of Lease jobs.
	LeaseHandler LeaseHandler

	// Concurrency caps the workers of this job. Default: the scheduler's
	// total.
	Concurrency int
	// Priority orders jobs competing for workers: higher first. Among jobs
	// of equal priority, the one with fewer running workers goes first, so
	// one slow job cannot keep another's slots waiting.
	Priority int

	// Queue configures acquisition: MaxWork, DeadMan, LeaseTTL, StopBefore,
	// Retry, MaxAttempts, NewestFirst, From/To (default: Start and End).
	// Schema and Logger come from the scheduler's options, Lag from the
	// job's.
	Queue acquire.Options
}

// Validate reports what is wrong with the job, before it is added: no
// series, no handler for its mode, a negative lag, a cron spec that is
// malformed or never fires. Errors wrap slot.ErrInvalid.
func (j *Job) Validate() error {
	var errs []error
	if j.Series.Interval().IsZero() {
		errs = append(errs, errors.New("job has no series"))
	}
	switch j.Mode {
	case Locked, LockedBatch:
		if j.Handler == nil {
			errs = append(errs, fmt.Errorf("%s mode needs Handler", j.Mode))
		}
	case Lease:
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
		if _, err := parseSchedule(j.Schedule); err != nil {
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
