package pgtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dirPrefix names throwaway cluster directories under os.TempDir(); each
// holds a file "owner" with the pid of the test binary that started it.
const dirPrefix = "almanac-pgtest-"

func ownerFile(dir string) string { return filepath.Join(dir, "owner") }

// reapOrphans stops and removes the clusters of test binaries that died
// without running Main's cleanup (a panic or -timeout ends the process from
// inside m.Run). It is best effort and errs on the side of leaving things:
// a directory is only touched when its owner is gone, and a process is only
// signalled when it provably is that directory's postmaster.
func reapOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(ownerFile(dir))
		if err != nil {
			continue // being created right now, or not ours
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processExists(owner) {
			continue
		}
		if stopPostmaster(filepath.Join(dir, "data")) {
			_ = os.RemoveAll(dir)
		}
	}
}

// stopPostmaster shuts down (immediate mode) the server running in dataDir,
// if any, and reports whether none is left.
func stopPostmaster(dataDir string) bool {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return false
	}
	if dataDir, err = filepath.EvalSymlinks(dataDir); err != nil {
		return false
	}
	// The pid file outlives a crashed server and its pid may since have
	// been reused. A postmaster's working directory is its data directory,
	// which identifies it (on Linux; elsewhere we cannot tell, and only
	// proceed if the pid is gone).
	isPostmaster := func() bool {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		return err == nil && cwd == dataDir
	}
	if !isPostmaster() {
		_, err := os.Stat("/proc/self/cwd")
		return err == nil || !processExists(pid)
	}
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(syscall.SIGQUIT)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !isPostmaster() {
			return true
		}
	}
	return false
}

func processExists(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}
