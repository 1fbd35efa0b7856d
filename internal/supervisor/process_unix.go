//go:build unix

package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
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
	status    *os.File // read end of the command's status
	exited    chan struct{}
	closeLife sync.Once
}

// Start starts the supervisor of the command spec describes, and through
// it the command. It returns once the supervisor runs; a command that then
// fails to start ends with status 127 (not found) or 126 (any other
// reason) and the reason on its stderr, as in a shell.
func Start(spec Spec) (*Process, error) {
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
	return &Process{cmd: cmd, lifeline: lifeW, status: statR, exited: make(chan struct{})}, nil
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
// killed).
func (p *Process) Wait() (Status, error) {
	werr := p.cmd.Wait()
	close(p.exited)
	p.closeLifeline()
	report, _ := io.ReadAll(p.status)
	p.status.Close()
	if st, ok := decodeStatus(strings.TrimSpace(string(report))); ok {
		return st, nil
	}
	if werr == nil || errors.Is(werr, exec.ErrWaitDelay) {
		werr = errors.New(p.cmd.ProcessState.String())
	}
	return Status{}, fmt.Errorf("supervisor ended without a status: %w", werr)
}
