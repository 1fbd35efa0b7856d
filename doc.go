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
// This package is an ordinary program's whole API: a program imports it and
// pgx, nothing else of almanac. Start from Client: it migrates the schema,
// registers series and jobs (a Job: a series, a Handler or LeaseHandler, a
// trigger and a Policy), runs the workers (Start and Stop, or Drain for a
// batch run), and answers coverage questions (Gaps, Status, Heatmap,
// History, Failures) and backfills (Materialize, Reopen, Skip, Retry, and
// their Tx variants inside the caller's transaction). Errors every layer
// returns are named here (ErrInvalid, ErrLeaseLost, ...), and errors.Is
// works on them whichever layer returned them.
//
// The layers below it are public for programs that work at their level;
// where a type is defined there (Series, Slot, Lease, Policy, the coverage
// results), this package names it too and says where its fields are
// documented:
//
//   - slot: the calendar (intervals, series grids, time zones, slot text),
//     pure Go.
//   - migrations: the schema as embedded, versioned SQL.
//   - acquire: locked mode and lease mode, fencing, retries, takeover, for
//     a claim loop of one's own.
//   - coverage: gaps, materialize, re-open, skip, retry, status over one
//     series, for a coverage query inside a tool.
//   - scheduler: Command, the sidecar's process runner.
//
// The command-line tool and sidecar is cmd/almanac, the coverage page
// package web, and almanactest the test kit. README.md states the
// guarantees and their limits.
package almanac
