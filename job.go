package almanac

import (
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/scheduler"
)

// Job is a series, a handler, a trigger and the policies for its slots.
// Only Series and a handler are required; every other field has a default,
// stated with it.
type Job struct {
	// Series is the grid of slots the job covers (from Client.Series).
	Series Series
	// Mode is how slots are held: ModeLocked (default), ModeLockedBatch or
	// ModeLease.
	Mode Mode
	// Handler runs the slots of ModeLocked and ModeLockedBatch jobs.
	Handler Handler
	// LeaseHandler runs the slots of ModeLease jobs.
	LeaseHandler LeaseHandler

	// Schedule is a cron spec (five fields, @hourly, @every 5m, with an
	// optional CRON_TZ=<zone> prefix) on which due slots are materialized.
	// Default: whenever the next slot becomes due.
	Schedule string
	// Lag is how long after its end a slot becomes due (slot_end + Lag on
	// the database clock), to absorb late data. Default 0.
	Lag time.Duration
	// CatchUp is the policy for slots missed while no worker ran. Default
	// CatchUpAll.
	CatchUp CatchUp
	// Start and End, when set, bound the job to the slots starting in
	// [Start, End): a backfill of a fixed range. Default: from the series'
	// earliest stored slot (for a series with none, the most recently due
	// one), without end.
	Start, End time.Time
	// LookBack is the window the periodic sweep re-materializes (a deleted
	// row, a series created late). Default the larger of 24 hours and 10
	// intervals.
	LookBack time.Duration

	// Batch is the number of slots a ModeLockedBatch transaction takes.
	// Default 100.
	Batch int
	// Concurrency caps this job's workers. Default: Options.Concurrency.
	Concurrency int
	// Priority orders jobs that compete for workers: higher first. Default
	// 0.
	Priority int
	// NewestFirst works the latest slot first (for freshness) instead of
	// the oldest (for completeness, the default).
	NewestFirst bool

	// MaxWork bounds one locked-mode handler run. Default 5 min.
	MaxWork time.Duration
	// DeadMan is the locked-mode dead-man switch: a frozen worker's
	// transaction is ended by PostgreSQL within it. Default 10 s.
	DeadMan time.Duration
	// LeaseTTL is how long a lease lasts without a heartbeat. Default 30 s.
	LeaseTTL time.Duration
	// StopBefore is how long before its lease could expire a holder that
	// cannot renew it stops its work. Default LeaseTTL/10.
	StopBefore time.Duration
	// TakeoverGrace is how long an expired lease is left to its holder
	// before another worker takes it over. Default 5 s; negative: none.
	TakeoverGrace time.Duration
	// Retry maps a failure to a delay or to giving up. Default DefaultRetry.
	Retry RetryPolicy
	// MaxAttempts parks a slot after this many failures. Default: the
	// series' max_attempts setting, else no limit.
	MaxAttempts int
}

// schedulerJob is j as the scheduler takes it.
func (j Job) schedulerJob() scheduler.Job {
	return scheduler.Job{
		Series: j.Series, Schedule: j.Schedule, Lag: j.Lag, CatchUp: j.CatchUp,
		Start: j.Start, End: j.End, LookBack: j.LookBack,
		Mode: j.Mode, Batch: j.Batch, Handler: j.Handler, LeaseHandler: j.LeaseHandler,
		Concurrency: j.Concurrency, Priority: j.Priority,
		Queue: acquire.Options{
			Policy: acquire.Policy{NewestFirst: j.NewestFirst, MaxWork: j.MaxWork, DeadMan: j.DeadMan, LeaseTTL: j.LeaseTTL, StopBefore: j.StopBefore, TakeoverGrace: j.TakeoverGrace, Retry: j.Retry, MaxAttempts: j.MaxAttempts},
		},
	}
}
