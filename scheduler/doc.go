// Package scheduler runs jobs: a job is a series, a handler, a trigger and
// policies. On each trigger (a cron spec, or by default whenever the next
// slot becomes due: slot_end + lag <= now) the scheduler materializes the
// due slots, applying the job's catch-up policy to slots missed during
// downtime, and its workers drain the acquirable slots in the job's mode
// (package acquire). A periodic sweep re-materializes a look-back window,
// so a deleted row or a series created late is noticed.
//
// Every instance of a program may run the same jobs: materializing is
// idempotent and acquisition exclusive, so there is no leader to elect.
//
// Workers are shared by all jobs of a scheduler: Options.Concurrency caps
// them together and Job.Concurrency per job; when jobs compete, the higher
// Job.Priority goes first, and among equals the job with fewer running
// workers, so a slow job cannot keep another's slots waiting. Idle jobs wait
// for a notification (materialize, re-open, retry; LISTEN on a dedicated
// connection) with a poll as fallback, and fetch again at once after a full
// batch.
//
// Run shuts down gracefully when its context ends: no new acquisitions,
// running handlers get Options.ShutdownTimeout to finish, then their
// contexts are cancelled; locked-mode work rolls back and lease-mode work is
// released with its checkpoint, so nothing is lost.
//
// Command is the handler of the sidecar (`almanac run`): it runs a program
// per slot with the slot, and only what the program needs, in its
// environment, under a supervisor that kills the program and everything it
// started when the slot is lost, times out or the scheduler's process ends,
// however it ends (Command's godoc says what remains possible).
package scheduler
