// Package acquire turns a slot into work done exactly once. A Queue hands
// out the acquirable slots of one series in two modes that share the same
// table and states.
//
// It is the layer for a program that runs its own claim loop: one that
// decides itself when to take slots and what to do with them, as almanac's
// scheduler (the root package's Client) does for its jobs. Ordinary programs
// register jobs with the root package instead, which runs this loop for
// them; the types a handler sees (Slot, Lease, Handler, LeaseHandler,
// Policy) are the root package's too, under the same names.
//
// # Locked mode (Run, RunBatch)
//
// The default, for work of seconds to minutes. A transaction selects the
// first acquirable slot with FOR NO KEY UPDATE SKIP LOCKED, takes a fencing
// token, and stays open while the handler runs; the handler gets the
// transaction, and what it writes there commits atomically with the slot's
// COMPLETE: exactly-once for effects in the same database. Nothing is
// written to the slot row until the end, in one statement, so other
// sessions are never made to wait for the job. A handler error or panic
// rolls back to a savepoint taken before its first statement and records the
// failure; a worker crash or a lost connection rolls everything back, and
// the slot is acquirable again at once.
//
// A frozen worker (SIGSTOP, a half-open connection) cannot hold a slot for
// ever: the transaction sets idle_in_transaction_session_timeout to
// Policy.DeadMan and the worker pings its connection every DeadMan/4, so
// PostgreSQL ends a silent session within DeadMan. Locked mode holds one
// pool connection per running transaction; Options.Reserve connections are
// never held, so finishing work never waits for a connection. Use
// ConfigurePool on the pool's configuration for TCP keepalives and for query
// cancellation that keeps the connection.
//
// RunBatch is the throughput path for short tasks: up to N slots locked in
// one transaction, each handler in its own savepoint, all outcomes written
// with one UPDATE and one commit. RunAcross does the same for several
// series at once, a slot of each, locked by one statement: for many series
// that each have one slot due.
//
// Long transactions have a cost: while one is open, VACUUM cannot remove
// rows deleted after it started, anywhere in the database. Work that takes
// longer than a few minutes belongs in lease mode.
//
// # Lease mode (Claim, Lease)
//
// The timestamp fallback, for long work, for poolers in transaction mode,
// or for work that must not hold a connection. A short transaction claims
// slots: status ACQUIRED, this queue's owner id, a new fencing token, a
// deadline Policy.LeaseTTL ahead on the database clock. KeepAlive (or
// Lease.Extend) renews the leases; a lease that expires can be taken over by
// any worker, with TookOver set. Lease.Finish records the outcome a
// handler's error stands for, as locked mode does. Every write of a Lease
// carries the guard "owner = me AND fence = my token": a holder that lost the
// slot changes nothing and gets ErrLeaseLost. Lease.CompleteTx completes
// inside the caller's transaction, so the caller's writes and COMPLETE commit
// together.
// Queue.Eject takes a held slot over at once (a callback arrived); the
// previous holder's next write fails.
//
// # Outcomes and retries
//
// A handler returns nil (COMPLETE), Skip(reason) (SKIP), Snooze(d) (stays
// AVAILABLE until d has passed, not a failure, optionally saving a
// checkpoint), or an error (a failure: fail_count grows, the message keeps
// the error text, and Policy.Retry decides the delay). After
// Policy.MaxAttempts failures, or when the policy gives up, the slot is
// parked: AVAILABLE with not_before = 'infinity', visible in status and gap
// reports until it is re-opened or retried. Nothing disappears silently.
// Every time comparison uses the database clock (clock_timestamp()), never
// the worker's.
//
// # Generations: once per slot, or once per computation
//
// A re-open (a backfill: late data arrived) asks for a slot to be computed
// again. Each computation is a generation of the slot: Slot.Generation is 1
// when the slot is created and grows by one with every re-open, and
// Slot.Attempt starts again at 1. Choose the key an external system
// deduplicates on by what must happen once:
//
//   - once per slot, ever (send one notification per day, whatever
//     backfills follow): Slot.Key(), "<name> <slot>", unchanged by
//     re-opens;
//   - once per computation (store each recomputed report, so a backfill is
//     not mistaken for a repeat and dropped): Slot.ComputationKey(),
//     "<name> <slot> <generation>".
//
// Both are the same in every attempt of a computation. Commands run by the
// sidecar get them as ALMANAC_KEY and ALMANAC_COMPUTATION_KEY, with
// ALMANAC_GENERATION and ALMANAC_ATTEMPT.
//
// # History
//
// Every outcome is recorded when the statement that writes it ends, with the
// run's owner (Options.Owner), fence, attempt and generation: the slot
// table's trigger (slot_record, migration 11) writes the event from the
// row's change, as the schema's owner, so that the role workers run as
// cannot write history itself. A completion is
// recorded on the slot's row (completed_at, completed_by, beside its fence,
// attempts and generation), so that a slot done once adds nothing to the
// history table; a re-open moves it into the history row it writes. Every
// other outcome (failed, parked, skipped, snoozed, released) is a row of
// the slot's history (the slot_event table), and so is a run that loses its
// slot to a takeover or an ejection. A claim is not recorded: the lease
// holder is on the slot row. The slot_history view, coverage.Client.History
// and `almanac history` show all of it as one list of events.
//
// # Work outside the database: four recipes
//
// Exactly-once holds for effects written in the slot's transaction. For
// anything else, a slot may be worked more than once (a worker dies after
// the effect and before the commit), so make the effect safe to repeat with
// one of these, according to what the other system offers:
//
//   - Idempotency key: send Slot.ComputationKey() (the same in every attempt
//     of a computation; Slot.Key() if a re-open must not repeat the effect)
//     as the idempotency key; the system applies the effect once. Record its
//     response in the slot's transaction.
//   - Optimistic lock: the system accepts a condition. Send the fencing
//     token with the write and let the system keep the largest it has seen
//     (INSERT … ON CONFLICT (key) DO UPDATE … WHERE sink.fence <
//     EXCLUDED.fence); a holder that lost the slot has a smaller token and is
//     refused.
//   - Pessimistic lock: the system can say whether the action was done and
//     what came of it. Look it up by Slot.Key() first; if it is done, record
//     that result instead of acting again; otherwise act. With TookOver set,
//     always look first.
//   - Black-boxed: the system offers neither. Use lease mode and save a
//     checkpoint ("about to call") with Lease.Checkpoint before acting. A
//     holder that finds that checkpoint in Slot.Data, or sees TookOver, knows
//     its predecessor may have acted and cannot know the outcome: it records
//     "uncertain" (Skip with that reason, or a failure a person reviews)
//     rather than acting twice. (Locked mode cannot do this: a locked-mode
//     holder that dies leaves no trace.)
package acquire
