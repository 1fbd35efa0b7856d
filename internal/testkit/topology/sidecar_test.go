//go:build linux

package topology

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sidecar is a running `almanac run`.
type sidecar struct {
	name string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{}
	err  error
}

// startSidecar starts the CLI with args. It gets SIGKILL if the test binary
// dies (and takes its commands with it); the test's cleanup stops it.
func startSidecar(t *testing.T, name string, args ...string) *sidecar {
	t.Helper()
	s := &sidecar{name: name, cmd: exec.Command(almanacCLI(t), args...), out: &logBuffer{}, done: make(chan struct{})}
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LANG=C"}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := spawn(s.cmd); err != nil {
		t.Fatalf("start sidecar %s: %v", name, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.stop(t, 30*time.Second)
		if t.Failed() {
			t.Logf("sidecar %s output:\n%s", name, s.out)
		}
	})
	return s
}

// stop sends SIGTERM and waits for the sidecar to exit, killing it after
// timeout. It returns the exit code (-1 for a signal).
func (s *sidecar) stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(timeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("sidecar %s did not exit within %s of SIGTERM", s.name, timeout)
	}
	return s.cmd.ProcessState.ExitCode()
}

// wait waits for the sidecar to exit by itself and returns its exit code.
func (s *sidecar) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("sidecar %s still running after %s; output:\n%s", s.name, timeout, s.out)
		return 0
	}
}

// exited reports whether the sidecar has exited.
func (s *sidecar) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// recorder is the command sidecars run: it appends a start line before its
// work and an end line after it (also when stopped by SIGTERM) to a runs
// file, with the slot, the fencing token and the time on the machine's
// monotonic clock (/proc/uptime, read by the shell itself), so runs of
// several processes can be compared. Usage: sh -c recorder sh RUNS WORK,
// where WORK is how many seconds a run works, or a file holding that
// number, read at the start of every run.
const recorder = `rec() { read up _ </proc/uptime; echo "$1 $ALMANAC_SLOT $ALMANAC_FENCE $up $$" >>"$RUNS"; }
RUNS=$1
work=$2
if [ -f "$work" ]; then read work <"$2"; fi
trap 'rec term; exit 143' TERM
rec start
sleep "$work" & wait $!
rec end`

// recordCommand returns the command line (after --) that records its runs
// in file and works for seconds.
func recordCommand(file string, seconds float64) []string {
	return []string{"sh", "-c", recorder, "sh", file, strconv.FormatFloat(seconds, 'f', -1, 64)}
}

// pacedCommand returns the command line (after --) that records its runs
// in file and works as long as the pace file says when each run starts.
func pacedCommand(file, pace string) []string {
	return []string{"sh", "-c", recorder, "sh", file, pace}
}

// run is one run of a command, as recorded.
type run struct {
	slot       string
	fence      int64
	pid        int
	start, end float64 // seconds on the monotonic clock; end 0 if none recorded
	how        string  // "end", "term", or "" while running
}

// readRuns parses a runs file.
func readRuns(t *testing.T, file string) []run {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byKey := map[string]*run{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 5 {
			t.Fatalf("runs file %s: malformed line %q", file, sc.Text())
		}
		fence, err1 := strconv.ParseInt(fields[2], 10, 64)
		at, err2 := strconv.ParseFloat(fields[3], 64)
		pid, err3 := strconv.Atoi(fields[4])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("runs file %s: malformed line %q", file, sc.Text())
		}
		key := fields[1] + " " + fields[2] + " " + fields[4]
		r := byKey[key]
		if r == nil {
			r = &run{slot: fields[1], fence: fence, pid: pid}
			byKey[key] = r
			order = append(order, key)
		}
		switch fields[0] {
		case "start":
			r.start = at
		default:
			r.end, r.how = at, fields[0]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	runs := make([]run, len(order))
	for i, k := range order {
		runs[i] = *byKey[k]
	}
	return runs
}

// duplicates returns, for every slot run more than once, a description of
// its runs.
func duplicates(runs []run) []string {
	bySlot := map[string][]run{}
	for _, r := range runs {
		bySlot[r.slot] = append(bySlot[r.slot], r)
	}
	var out []string
	for _, slot := range slices.Sorted(maps.Keys(bySlot)) {
		rs := bySlot[slot]
		if len(rs) < 2 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "slot %s ran %d times:", slot, len(rs))
		for _, r := range rs {
			fmt.Fprintf(&b, " [fence %d pid %d %.2f-%.2f %s]", r.fence, r.pid, r.start, r.end, r.how)
		}
		out = append(out, b.String())
	}
	return out
}

// uptime reads the clock the recorder uses.
func uptime(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// runsFile returns a fresh runs file path in the test's directory.
func runsFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "runs")
}

// logBuffer keeps the last 256 KiB written to it.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - 256<<10; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(bytes.TrimSpace(l.buf))
}
