//go:build unix

package supervisor

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeOnExecListed marks close-on-exec every descriptor above stderr that
// dir (/proc/self/fd, /dev/fd) lists. It reports whether dir could be read.
func closeOnExecListed(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		// One of them is the directory being read, which is close-on-exec
		// already; a descriptor closed meanwhile fails harmlessly.
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return true
}
