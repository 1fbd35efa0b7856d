//go:build linux && !race

package topology

const raceEnabled = false
