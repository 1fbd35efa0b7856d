//go:build unix && !linux

package supervisor

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// closeInherited marks every descriptor above stderr close-on-exec, so that
// the command gets only its standard input, output and error. On macOS
// /dev/fd lists them all; elsewhere it may list only 0 to 2 (FreeBSD
// without fdescfs), so every descriptor up to the soft limit on open files
// is marked.
func closeInherited() {
	if runtime.GOOS == "darwin" && closeOnExecListed("/dev/fd") {
		return
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return
	}
	for fd := uint64(3); fd < min(uint64(lim.Cur), 1<<20); fd++ {
		unix.CloseOnExec(int(fd))
	}
}

// undumpable does nothing: there is no such flag here, and a process of the
// same user can read this one's environment (ps -E on macOS).
func undumpable() {}
