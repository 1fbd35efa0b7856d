// Package scheduler runs a program once per slot: Command, the handler of
// the sidecar (`almanac run`). It runs the program with the slot, and only
// what the program needs, in its environment, under a supervisor that kills
// the program and everything it started when the slot is lost, times out or
// the process running it ends, however it ends (Command's godoc says what
// remains possible).
//
// It is for programs that run commands per slot. The root package names
// Command too (almanac.Command) and runs it as the LeaseHandler of a
// lease-mode job: ordinary programs need only the root package. The jobs'
// scheduler itself (triggers, catch-up, the shared worker pool, Drain) is
// the root package's Client.
package scheduler
