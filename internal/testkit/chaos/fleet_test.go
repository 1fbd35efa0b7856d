//go:build linux

package chaos

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildWorker builds the worker program into a directory of its own, with
// the race detector if the test has it: a worker that reports a race exits
// 66, which fails the round.
func buildWorker() (string, error) {
	dir, err := os.MkdirTemp("", "chaos-worker-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "worker")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "./worker")...).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("build the worker: %w\n%s", err, out)
	}
	return bin, nil
}

// workerSpec is one worker of the fleet; a killed worker is restarted with
// the same spec (and a new seed).
type workerSpec struct {
	name string
	mode string // locked, batch or lease
	args []string
}

// proc is one incarnation of a worker.
type proc struct {
	spec  *workerSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int

	exited chan struct{}
	err    error // from Wait, valid once exited is closed

	// doomed is set before we kill the process or shut it down, so its
	// exit is not reported as unexpected.
	doomed bool
	// busy is set while a fault works on the process, so no other fault
	// picks it (a frozen process must not be killed, nor a dead one frozen).
	busy bool
}

// fleet runs the worker processes. Their output goes to one buffer per
// worker (all incarnations), shown when a check fails.
type fleet struct {
	bin  string
	seed int64

	mu       sync.Mutex
	live     []*proc
	all      []*proc
	logs     map[string]*logBuffer
	problems []string // unexpected exits
}

func newFleet(t *testing.T, bin string, seed int64) *fleet {
	f := &fleet{bin: bin, seed: seed, logs: map[string]*logBuffer{}}
	t.Cleanup(f.reap)
	return f
}

// start starts an incarnation of spec.
func (f *fleet) start(spec *workerSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	log := f.logs[spec.name]
	if log == nil {
		log = &logBuffer{}
		f.logs[spec.name] = log
	}
	seed := strconv.FormatInt(f.seed*1000+int64(len(f.all)), 10)
	cmd := exec.Command(f.bin, append(slices.Clone(spec.args), "-seed", seed)...)
	cmd.Stdout, cmd.Stderr = log, log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", spec.name, err)
	}
	p := &proc{spec: spec, cmd: cmd, stdin: stdin, pid: cmd.Process.Pid, exited: make(chan struct{})}
	fmt.Fprintf(log, "--- %s pid %d started %s\n", spec.name, p.pid, time.Now().Format(time.RFC3339Nano))
	go func() {
		err := cmd.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		p.err = err
		close(p.exited)
		if !p.doomed {
			f.problems = append(f.problems, fmt.Sprintf("worker %s (pid %d) exited on its own: %v", spec.name, p.pid, err))
		}
	}()
	f.live = append(f.live, p)
	f.all = append(f.all, p)
	return nil
}

// pick reserves a live process that no fault is working on, of mode if not
// empty, preferring one in holders (pids holding a slot); pick (in [0, 1))
// chooses among the candidates. It returns nil if there is none.
func (f *fleet) pick(mode string, holders map[int]bool, pick float64) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var free, holding []*proc
	for _, p := range f.live {
		if p.busy || (mode != "" && p.spec.mode != mode) {
			continue
		}
		free = append(free, p)
		if holders[p.pid] {
			holding = append(holding, p)
		}
	}
	if len(holding) > 0 {
		free = holding
	}
	if len(free) == 0 {
		return nil
	}
	p := free[int(pick*float64(len(free)))]
	p.busy = true
	return p
}

func (f *fleet) release(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.busy = false
}

// kill SIGKILLs p, waits for it to die, and takes it off the live list.
func (f *fleet) kill(p *proc) error {
	f.mu.Lock()
	p.doomed = true
	f.live = slices.DeleteFunc(f.live, func(q *proc) bool { return q == p })
	f.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("worker %s (pid %d) still alive 10 s after SIGKILL", p.spec.name, p.pid)
	}
}

func (f *fleet) signal(p *proc, sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// shutdown sends SIGTERM to every live worker and waits for each to exit
// 0. Workers must finish or give back what they hold within timeout.
func (f *fleet) shutdown(timeout time.Duration) []string {
	f.mu.Lock()
	live := slices.Clone(f.live)
	for _, p := range live {
		p.doomed = true
	}
	f.live = nil
	f.mu.Unlock()
	var problems []string
	for _, p := range live {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			problems = append(problems, fmt.Sprintf("SIGTERM worker %s (pid %d): %v", p.spec.name, p.pid, err))
		}
	}
	deadline := time.After(timeout)
	for _, p := range live {
		select {
		case <-p.exited:
			if p.err != nil {
				problems = append(problems, fmt.Sprintf("worker %s (pid %d) exited with %v after SIGTERM", p.spec.name, p.pid, p.err))
			}
		case <-deadline:
			problems = append(problems, fmt.Sprintf("worker %s (pid %d) did not exit within %s of SIGTERM", p.spec.name, p.pid, timeout))
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	return problems
}

// unexpected returns the unexpected exits seen so far.
func (f *fleet) unexpected() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.problems)
}

// incarnations counts the processes started.
func (f *fleet) incarnations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.all)
}

// output returns the workers' output, for a failure report.
func (f *fleet) output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(f.logs)) {
		fmt.Fprintf(&b, "=== worker %s\n%s\n", name, f.logs[name].String())
	}
	return b.String()
}

// reap kills whatever is left (a failed test) and closes the workers'
// standard input, which also ends any process we lost track of.
func (f *fleet) reap() {
	f.mu.Lock()
	all := slices.Clone(f.all)
	for _, p := range all {
		p.doomed = true
	}
	f.mu.Unlock()
	for _, p := range all {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = p.stdin.Close()
		<-p.exited
	}
}

// logBuffer keeps the last 64 KiB written to it.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const logKeep = 64 << 10

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - logKeep; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(bytes.TrimSpace(l.buf))
}
