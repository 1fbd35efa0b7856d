//go:build unix

package supervisor

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

const (
	// supervisorArg0 and supervisorEnv mark a process started as a
	// supervisor; init checks both.
	supervisorArg0 = "almanac-supervisor"
	supervisorEnv  = "ALMANAC_SUPERVISOR"
	// lifelineFD and statusFD are the supervisor's ends of the two pipes.
	lifelineFD = 3
	statusFD   = 4

	// waitDelay bounds how long Wait waits for the command's output after
	// the supervisor exited: a descendant that survived (see the package
	// limits) may hold the output pipes open.
	waitDelay = 2 * time.Second
)

// killTimeout is how long a supervisor gets to kill everything after its
// lifeline closed; past it, the supervisor itself is killed (it is frozen
// or wedged) and its command dies by its parent-death signal. A variable
// for tests.
var killTimeout = 5 * time.Second

// Process is a command running under its supervisor.
type Process struct {
	cmd       *exec.Cmd
	lifeline  *os.File // write end; closing it makes the supervisor kill everything
	exited    chan struct{}
	closeLife sync.Once
	reported  chan struct{} // closed once the supervisor's report is read to its end
	report    report        // set before reported is closed
}

// report is what the supervisor said, and what the program did when it
// said too little.
type report struct {
	status Status
	ok     bool // status was reported
	group  int  // the command's process group, killed because no status came
}

// undumpableOnce makes the program non-dumpable when it starts its first
// command: its environment and memory hold what the command must not see
// (the database URL and its password).
var undumpableOnce sync.Once

// Start starts the supervisor of the command spec describes, and through
// it the command. It returns once the supervisor runs; a command that then
// fails to start ends with status 127 (not found) or 126 (any other
// reason) and the reason on its stderr, as in a shell.
func Start(spec Spec) (*Process, error) {
	undumpableOnce.Do(undumpable)
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	cmd := exec.Command(selfPath())
	cmd.Args = append([]string{supervisorArg0, spec.Path}, spec.Args...)
	cmd.Env = append(slices.Clip(spec.Env), supervisorEnv+"=1")
	cmd.Dir = spec.Dir
	cmd.Stdout, cmd.Stderr = spec.Stdout, spec.Stderr
	cmd.ExtraFiles = []*os.File{lifeR, statW} // fds 3 and 4
	// A group of its own: a terminal's Ctrl-C reaches the program, which
	// decides when its commands stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	err = cmd.Start()
	lifeR.Close()
	statW.Close()
	if err != nil {
		lifeW.Close()
		statR.Close()
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	p := &Process{cmd: cmd, lifeline: lifeW, exited: make(chan struct{}), reported: make(chan struct{})}
	go p.readReport(statR)
	return p, nil
}

// readReport reads what the supervisor reports on r: the command's pid once
// it started, its status once it ended. The pipe ends when the supervisor
// does. If it ended without a status, it was killed (by a descendant of the
// command, by the out-of-memory killer, by Kill when frozen), and nothing
// would kill what the command started: its process group is killed at once.
// The group's id is the command's pid, which cannot be given to another
// process while any process of the group lives; once all are gone, only
// after the kernel's pid counter wrapped around, which takes far longer than
// the moment between the supervisor's end and this kill.
func (p *Process) readReport(r *os.File) {
	defer close(p.reported)
	defer r.Close()
	pid := 0
	lines := bufio.NewScanner(r)
	for lines.Scan() {
		if st, ok := decodeStatus(lines.Text()); ok {
			p.report.status, p.report.ok = st, true
		} else {
			_, _ = fmt.Sscanf(lines.Text(), "pid %d", &pid)
		}
	}
	if !p.report.ok && pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		p.report.group = pid
	}
}

// Terminate asks the command to stop: its process group gets SIGTERM. It
// does nothing once the command has ended.
func (p *Process) Terminate() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

// Kill ends the command now: SIGKILL for its process group and, on Linux,
// every descendant. It returns at once; Wait returns when all is dead. Safe
// to call at any time, more than once, also after Wait.
func (p *Process) Kill() {
	p.closeLifeline()
	t := time.NewTimer(killTimeout)
	go func() {
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			_ = p.cmd.Process.Kill()
		}
	}()
}

func (p *Process) closeLifeline() { p.closeLife.Do(func() { p.lifeline.Close() }) }

// Wait waits until the command and everything the supervisor killed are
// gone and the command's output is written, and returns how the command
// ended. It fails only if the supervisor did not report a status (it was
// killed); the error says so, and whether the command's process group was
// killed for it.
func (p *Process) Wait() (Status, error) {
	werr := p.cmd.Wait()
	close(p.exited)
	p.closeLifeline()
	<-p.reported
	if p.report.ok {
		return p.report.status, nil
	}
	how, state := "ended without a status", ""
	if ps := p.cmd.ProcessState; ps == nil {
		state = werr.Error() // it could not be waited for
	} else {
		state = ps.String()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			how = "was killed"
		}
	}
	err := fmt.Errorf("the supervisor %s (%s)", how, state)
	if p.report.group > 0 {
		err = fmt.Errorf("%w; the command's process group was killed", err)
	}
	return Status{}, err
}
