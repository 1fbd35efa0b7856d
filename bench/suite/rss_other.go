//go:build !linux

package suite

import (
	"errors"
	"os/exec"
)

// rssUnsupported says why peak RSS cannot be measured here; empty when it
// can.
const rssUnsupported = "peak RSS is read from /proc, on Linux only"

// runPeakRSS is not available on this system.
func runPeakRSS(*exec.Cmd) (float64, error) { return 0, errors.New(rssUnsupported) }
