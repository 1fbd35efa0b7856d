//go:build linux && race

package chaos

// raceEnabled: the suite is built with the race detector, and builds the
// workers with it too, so a data race in almanac under faults fails the run.
const raceEnabled = true
