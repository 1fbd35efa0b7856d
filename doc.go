// Package almanac makes a fleet of workers process every interval of a time
// range exactly once, coordinated only through PostgreSQL.
//
// A task is a slot: a series name plus an ISO-8601 time interval such as
// 2026-03-01T00:00:00Z/PT5M. Slots live in one table; workers acquire them,
// do the work for that interval, and mark them COMPLETE in the same
// transaction as their results. Gap detection makes a missing interval
// impossible to overlook, and a backfill re-opens completed slots when late
// data arrives.
//
// Start from Client: it migrates the schema, registers series and jobs, runs
// the workers (Start/Stop, or Drain for a batch run), and answers coverage
// questions (Gaps, Status) and backfills (Materialize, Reopen, SkipRange,
// Retry). The parts it wires are usable on their own:
//
//   - slot: the calendar model (intervals, series grids, time zones, slot
//     text), pure Go.
//   - migrations: the schema as embedded, versioned SQL.
//   - acquire: locked mode and lease mode, fencing, retries, takeover.
//   - coverage: gaps, materialize, re-open, skip, retry, status.
//   - scheduler: triggers, catch-up, worker pools, the exec sidecar.
//
// The command-line tool and sidecar is cmd/almanac. README.md states the
// guarantees and their limits.
package almanac
