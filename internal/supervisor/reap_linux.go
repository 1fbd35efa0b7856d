package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// selfPath is the running program's binary: /proc/self/exe works even when
// the file has been replaced or deleted since (a deployment).
func selfPath() string { return "/proc/self/exe" }

// becomeSubreaper makes orphaned descendants children of this process. If
// the kernel refuses (before Linux 3.4), they go to init as elsewhere.
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// commandAttr puts the command in a process group of its own and kills it
// when the supervisor dies.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// children lists the processes whose parent is this one, from /proc.
func children() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(string(fields[1])); err == nil && ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
