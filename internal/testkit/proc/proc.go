//go:build linux

// Package proc lets tests wait for processes that are not their children
// (a sidecar's command, its grandchildren) to end. It waits on the event the
// kernel gives, a pidfd becoming readable when the process exits, instead
// of polling /proc, so a test learns of the exit at once and its time bound
// is the only clock involved.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Alive reports whether pid exists and has not exited. A zombie (exited,
// not yet reaped by its parent) is not alive.
func Alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// WaitExit waits until pid has exited (a zombie counts as exited), for at
// most within. It returns nil at once for a pid that no longer exists, and
// an error naming the pid when it still runs after within.
func WaitExit(pid int, within time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(within)
	for {
		wait := max(time.Until(deadline), 0)
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(wait.Milliseconds()))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("poll pidfd of %d: %w", pid, err)
		case n > 0:
			return nil
		}
		return fmt.Errorf("pid %d still runs %s later", pid, within)
	}
}
