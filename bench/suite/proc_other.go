//go:build !linux

package suite

import "errors"

// procUnsupported says why the CPU time and resident memory of processes
// cannot be read here; empty when they can.
const procUnsupported = "CPU time and resident memory are read from /proc, on Linux only"

var errProc = errors.New(procUnsupported)

func processCPU(int) (float64, error)  { return 0, errProc }
func serverCPU(int) (float64, error)   { return 0, errProc }
func parentPID(int) (int, error)       { return 0, errProc }
func residentMiB(int) (float64, error) { return 0, errProc }

func loadAverage() string { return "unknown" }
