// Package longtest switches the test suite between its two lengths. By
// default the long tests (property tests, soak-like loops, fault rounds)
// run a short, fixed sample, so that `go test -race ./...` stays within
// about two minutes on a small machine; with ALMANAC_LONG_TESTS=1 they run
// their full length, which a maintainer does before a release. Both modes
// make the same kinds of checks: only the number of cases differs.
package longtest

import "os"

// Env is the environment variable that selects the long mode.
const Env = "ALMANAC_LONG_TESTS"

// Enabled reports whether ALMANAC_LONG_TESTS is set to anything but "" or
// "0".
func Enabled() bool {
	v := os.Getenv(Env)
	return v != "" && v != "0"
}

// Pick returns long in the long mode, else short.
func Pick[T any](short, long T) T {
	if Enabled() {
		return long
	}
	return short
}
