//go:build unix && !linux

package supervisor

import (
	"os"
	"syscall"
)

// selfPath is the running program's binary.
func selfPath() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

// becomeSubreaper does nothing: there are no subreapers here, and orphaned
// descendants go to init.
func becomeSubreaper() {}

// commandAttr puts the command in a process group of its own; there is no
// parent-death signal here.
func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// children returns nothing: without a subreaper, the command is the only
// child, and it is waited for by pid.
func children() []int { return nil }
