// Package chaos is almanac's reliability suite: real worker processes, real
// faults, and an exactly-once check from the outside. It has no API; its
// tests (TestChaos, TestChaosSeries, TestChaosDependencies) are the suite,
// and internal/chaos/worker is the worker program they build.
//
// The test starts its own PostgreSQL cluster (pgcluster, TCP on 127.0.0.1,
// durable settings so that an immediate shutdown is a real crash recovery).
// A round, in a schema of its own, registers one series of 1,200
// one-minute slots (2,400 with ALMANAC_LONG_TESTS) and starts ten worker
// processes that mix locked mode (Queue.Run), batched locked mode
// (Queue.RunBatch) and lease mode (Queue.Claim, KeepAlive,
// Lease.CompleteTx); three of them connect as a role whose defaults are
// hostile (short statement, lock and idle-in-transaction timeouts,
// serializable isolation). The workers materialize the first part of the
// range in overlapping pieces as they start. Every handler writes an effect
// row in the slot's transaction and records its attempt in a ledger over a
// separate connection; a trigger records every change of a slot's status,
// fence or owner, with its transaction id.
//
// While the slots are worked, faults fire at random points of progress
// drawn from a seed: SIGKILL of workers (restarted after), SIGSTOP of a
// worker of each mode for longer than the lease and the locked-mode dead-man
// timeout (then SIGCONT; meanwhile the suite checks that PostgreSQL ended
// the frozen worker's transactions and that its leases expired, and ejects
// the slot a frozen lease worker was working on, so that it wakes up to a
// slot someone else holds), pg_terminate_backend of holders, re-opens of
// completed ranges, a wave of concurrent overlapping materializations of
// the rest of the range, and a fast and an immediate PostgreSQL restart.
// When the faults are over, the workers must finish every slot within a
// bound; then they are stopped and the invariants are checked:
//
//   - every slot of the range is COMPLETE, or SKIP where the workers were
//     told to skip it, and coverage.Gaps finds no gap;
//   - no slot, effect or ledger row lies outside the range;
//   - one effect per slot per generation (a re-opened slot once more), each
//     committed in the transaction that completed its slot;
//   - the fences of accepted writes grow strictly per slot, a slot's fence
//     never goes back, a lease is never taken over before it expired, and
//     no write of a holder that had been fenced out was accepted;
//   - every completion a worker saw acknowledged survived, and no write a
//     worker saw refused was accepted;
//   - ledger entries of one slot overlap only when the earlier holder was
//     fenced out (refused, killed, frozen, cut off) or the later one's
//     transaction rolled back before its token took effect.
//
// TestChaosSeries runs the same faults and checks against the root
// package's engine over many series: six workers (locked, batched and
// lease mode, two as the hostile role), each an almanac.Client with a job
// per series over 1,000 one-minute series (2 slots each, 8 with
// ALMANAC_LONG_TESTS), which the engines register and materialize as they
// start. Re-opens take whole series that are done, and there is no
// materialize wave.
// The invariants above hold per series and slot; besides, every series
// got every slot done, and no process ran two attempts of one job at once
// (Job.Concurrency 1), save a locked-mode handler abandoned past its
// MaxWork.
//
// TestChaosDependencies runs TestChaos's rounds with a dependency: the
// series depends on an upstream series (PT5M, every slot done by the suite)
// whose slots the suite re-opens by plain SQL and, after a pause, does again
// with a new fence, while workers are killed and frozen; its workers'
// handlers are shorter and it restarts no server, to stay within a minute.
// Besides the invariants above (counted per generation, including the
// generations the re-opens start and the runs on stale input that end as
// the next generation), every COMPLETE slot must have been completed by a
// run that began after each overlapping upstream slot was done for the last
// time.
//
// The tests share one server and one build of the worker.
//
// The seed fixes the plan: which faults fire, at which points of progress,
// and the random choices they make. The interleaving with the workers is
// not reproducible, so a replay runs the same plan, not the same history.
// A failing invariant names the seed, the slot, and the ledger entries and
// slot history involved. Under -race the workers are built with the race
// detector too, and one that reports a race fails the round. The test prints a summary (faults by kind, slots,
// effects, duplicates, refused stale writes, time to drain, seed) with -v.
//
// Environment:
//
//	ALMANAC_CHAOS_SEED=N    replay the round of seed N (default: the clock)
//	ALMANAC_LONG_TESTS=1    rounds of 2,400 slots instead of 1,200, and
//	                        8 slots per series instead of 2
//	ALMANAC_CHAOS_SOAK=30m  run rounds back to back (seeds N, N+1, …) for
//	                        that long, on one cluster, stopping at the first
//	                        failure
//
// For example:
//
//	go test -race -v -run 'TestChaos$' ./internal/testkit/chaos/
//	go test -race -v -run TestChaosSeries ./internal/testkit/chaos/
//	go test -race -v -run TestChaosDependencies ./internal/testkit/chaos/
//	ALMANAC_CHAOS_SEED=1234 go test -v -run 'TestChaos$' ./internal/testkit/chaos/
//	ALMANAC_CHAOS_SOAK=30m go test -v -timeout 40m -run 'TestChaos$' ./internal/testkit/chaos/
package chaos
