package suite

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// rssUnsupported says why peak RSS cannot be measured here; empty when it
// can.
const rssUnsupported = ""

// rssEvery is how often the high-water mark of a running process is read.
const rssEvery = 2 * time.Millisecond

// runPeakRSS runs cmd and returns its peak resident set size in MiB: the
// VmHWM line of /proc/<pid>/status, read every rssEvery while it runs.
// (wait4's ru_maxrss cannot be used: a process started by a Go program,
// whose clone shares the parent's memory until exec, starts from the
// parent's high-water mark.)
func runPeakRSS(cmd *exec.Cmd) (float64, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(rssEvery)
	defer tick.Stop()
	var peak int64 // kB
	for {
		if kb, ok := highWaterMark(cmd.Process.Pid); ok {
			peak = max(peak, kb)
		}
		select {
		case err := <-done:
			return float64(peak) / 1024, err
		case <-tick.C:
		}
	}
}

// highWaterMark reads the peak resident set size of a live process, in kB.
func highWaterMark(pid int) (int64, bool) { return statusKB(pid, "VmHWM:") }

// statusKB reads a line of /proc/<pid>/status given in kB, such as VmHWM:
// or VmRSS:.
func statusKB(pid int, field string) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}
