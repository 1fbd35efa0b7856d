package supervisor

import (
	"math"

	"golang.org/x/sys/unix"
)

// closeInherited marks every descriptor above stderr close-on-exec, so that
// the command gets only its standard input, output and error: neither the
// supervisor's pipes nor a descriptor the program inherited without
// close-on-exec (a shell's 7</secret) reach it. close_range needs Linux
// 5.11; before that, /proc/self/fd lists them.
func closeInherited() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) != nil {
		closeOnExecListed("/proc/self/fd")
	}
}

// undumpable makes this process non-dumpable (PR_SET_DUMPABLE 0): processes
// of the same user, the command among them, can then neither read its
// /proc/<pid>/environ, mem, maps or fd nor ptrace it; only a process with
// CAP_SYS_PTRACE (root) can. It also writes no core dump, and its
// /proc/<pid> files belong to root. Exec resets the flag: the command is
// dumpable as usual.
func undumpable() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
