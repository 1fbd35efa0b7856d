package almanac

import (
	"errors"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/scheduler"
	"github.com/almanacdev/almanac/slot"
)

// Errors callers can test with errors.Is. Each meaning has this one name;
// the packages below return errors that wrap these.
var (
	// ErrInvalid: malformed input (interval, time, zone, name, reason,
	// range, option).
	ErrInvalid = slot.ErrInvalid
	// ErrTooManySlots: a range holds more slots than the caller allowed
	// (also matches ErrInvalid).
	ErrTooManySlots = slot.ErrTooManySlots
	// ErrNotMigrated: the schema lacks migrations; run Client.Migrate.
	ErrNotMigrated = migrations.ErrNotMigrated
	// ErrUnknownSeries: the series is not registered.
	ErrUnknownSeries = seriesdb.ErrNotFound
	// ErrSeriesConflict: the series is registered with another zone or
	// origin, which would move every slot boundary.
	ErrSeriesConflict = seriesdb.ErrConflict
	// ErrLeaseLost: a lease-mode write found the slot no longer held by
	// this worker with this fencing token; nothing was changed.
	ErrLeaseLost = acquire.ErrLeaseLost
	// ErrUnavailable: the database stayed unreachable, or kept dropping
	// connections, for the whole retry budget (Options.RetryBudget).
	ErrUnavailable = retry.ErrUnavailable
	// ErrIncomplete: Drain returned with slots of its scope unfinished;
	// errors.As finds an *IncompleteError with the counts.
	ErrIncomplete = scheduler.ErrIncomplete
	// ErrStarted: the Client's jobs are running; Register and Drain wait
	// for Stop, and Start was called already.
	ErrStarted = errors.New("almanac: the client is started")
	// ErrNotStarted: Stop without a running Start.
	ErrNotStarted = errors.New("almanac: the client is not started")
	// ErrNoJobs: Start or Drain without a registered job.
	ErrNoJobs = errors.New("almanac: no job registered")
)
