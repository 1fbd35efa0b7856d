package almanac

import (
	"errors"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/supervisor"
	"github.com/almanacdev/almanac/migrations"
	"github.com/almanacdev/almanac/slot"
)

// Errors callers can test with errors.Is. Each meaning has this one name and
// one value: where a layer below names the error too (slot.ErrInvalid,
// acquire.ErrLeaseLost, migrations.ErrNotMigrated), it is the same value,
// so errors.Is works whichever package returned it.
var (
	// ErrInvalid: malformed input (interval, time, zone, name, reason,
	// range, option, schema name, environment entry). The message names
	// the value and what was expected.
	ErrInvalid = slot.ErrInvalid
	// ErrNotMigrated: the schema lacks migrations; run Client.Migrate.
	ErrNotMigrated = migrations.ErrNotMigrated
	// ErrServerVersion: Client.Migrate found a PostgreSQL server older
	// than 14, the oldest the schema works on, and applied nothing.
	ErrServerVersion = migrations.ErrServerVersion
	// ErrUnknownSeries: the series is not registered.
	ErrUnknownSeries = seriesdb.ErrUnknownSeries
	// ErrSeriesConflict: the series is registered with another zone or
	// origin, which would move every slot boundary.
	ErrSeriesConflict = seriesdb.ErrSeriesConflict
	// ErrLeaseLost: a lease-mode write found the slot no longer held by
	// this worker with this fencing token (its lease expired and another
	// worker took it over, it was ejected or re-opened); nothing was
	// changed. Roll back whatever depends on the lease.
	ErrLeaseLost = acquire.ErrLeaseLost
	// ErrTxManaged: a locked-mode handler called Commit or Rollback on the
	// transaction it was given, which belongs to almanac: return from the
	// handler instead.
	ErrTxManaged = acquire.ErrTxManaged
	// ErrConnectionLost is the cause (context.Cause) of a locked-mode
	// handler's context cancelled because its connection stopped answering:
	// the slot's transaction is gone, and the slot acquirable again.
	ErrConnectionLost = acquire.ErrConnectionLost
	// ErrPoolTooSmall: Start or Drain found a pool too small to hold a
	// locked-mode transaction and keep two connections free for everything
	// else. An exhausted pool hangs rather than fails, so this is checked
	// up front; raise its MaxConns.
	ErrPoolTooSmall = acquire.ErrPoolTooSmall
	// ErrCannotStart: Command.Check found that the command cannot be
	// started (not found, not executable, a missing interpreter).
	ErrCannotStart = supervisor.ErrCannotStart
	// ErrUnavailable: the database stayed unreachable, or kept dropping
	// connections, for the whole retry budget (Options.RetryBudget).
	ErrUnavailable = retry.ErrUnavailable
	// ErrIncomplete: Drain returned with slots of its scope unfinished;
	// errors.As finds an *IncompleteError with the counts.
	ErrIncomplete = errors.New("slots left unfinished")
	// ErrStarted: the Client's jobs are running; Register and Drain wait
	// for Stop, and Start was called already.
	ErrStarted = errors.New("almanac: the client is started")
	// ErrNotStarted: Stop without a running Start.
	ErrNotStarted = errors.New("almanac: the client is not started")
	// ErrNoJobs: Start or Drain without a registered job (and Ready when
	// asked for one).
	ErrNoJobs = errors.New("almanac: no job registered")
)
