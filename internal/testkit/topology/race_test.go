//go:build linux && race

package topology

// raceEnabled: the tests are built with the race detector and build the
// CLI with it too.
const raceEnabled = true
