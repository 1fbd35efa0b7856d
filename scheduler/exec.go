package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/slot"
)

// Defaults of Command.
const (
	// DefaultSkipExitCode is the exit code with which a command marks its
	// slot SKIP ("nothing to do for this interval"). 99 is unused by shells
	// (126, 127, 128+n) and by the sysexits conventions (64–78).
	DefaultSkipExitCode = 99
	// DefaultGrace is how long a command has to exit after SIGTERM before
	// it gets SIGKILL.
	DefaultGrace = 10 * time.Second
	// stderrTail bounds the part of a failed command's stderr kept as the
	// slot's failure message.
	stderrTail = 4096
)

// Command runs a program once per slot: the sidecar's handler. The slot is
// in the program's environment:
//
//	ALMANAC_NAME         series name
//	ALMANAC_INTERVAL     interval, e.g. PT5M
//	ALMANAC_SLOT         slot text, e.g. 2026-03-01T10:00:00Z/PT5M
//	ALMANAC_SLOT_START   start, RFC 3339 in the series' zone
//	ALMANAC_SLOT_END     end, RFC 3339 in the series' zone
//	ALMANAC_ATTEMPT      1 for the first attempt since the slot was created or re-opened
//	ALMANAC_FENCE        fencing token: pass it to systems that can refuse stale writers
//	ALMANAC_KEY          "<name> <slot text>", an idempotency key
//
// Exit status 0 completes the slot; SkipExitCode skips it; any other status
// or a death by signal is a failure whose message is the tail of the
// program's stderr (at most 4 KiB). The program runs in its own process
// group; when its lease is lost, its timeout passes or the scheduler shuts
// down, the group gets SIGTERM and, Grace later, SIGKILL.
type Command struct {
	Path string
	Args []string
	// Env is added to the scheduler's environment (KEY=value).
	Env []string
	// Dir is the working directory; empty means the current one.
	Dir string
	// SkipExitCode marks the slot SKIP. Zero means DefaultSkipExitCode.
	SkipExitCode int
	// Timeout bounds one run; zero means no limit (the lease is kept alive
	// for as long as the program runs).
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL. Zero means
	// DefaultGrace.
	Grace time.Duration
	// Stdout and Stderr receive the program's output, each line prefixed
	// with the slot ("[name 2026-03-01T10:00:00Z/PT5M] "). Nil discards it.
	Stdout, Stderr io.Writer
}

// LeaseHandler returns the handler that runs the command for a slot.
func (c Command) LeaseHandler() LeaseHandler {
	if c.SkipExitCode == 0 {
		c.SkipExitCode = DefaultSkipExitCode
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	var mu sync.Mutex // one line at a time on the shared outputs
	return func(ctx context.Context, l *acquire.Lease) error { return c.run(ctx, l, &mu) }
}

func (c Command) run(ctx context.Context, l *acquire.Lease, mu *sync.Mutex) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Timeout, fmt.Errorf("timed out after %s", c.Timeout))
		defer cancel()
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(append(os.Environ(), c.Env...), slotEnv(l.Slot)...)
	prefix := "[" + l.Name + " " + l.Slot.Slot.String() + "] "
	stdout := &lineWriter{w: c.Stdout, prefix: prefix, mu: mu}
	stderr := &lineWriter{w: c.Stderr, prefix: prefix, mu: mu}
	tail := &tailBuffer{max: stderrTail}
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(stderr, tail)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.Path, err)
	}
	running.Store(cmd.Process.Pid, struct{}{})
	defer running.Delete(cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = c.stop(cmd, done)
		stdout.flush()
		stderr.flush()
		// The cause says why: lease lost, timeout or shutdown.
		return fmt.Errorf("%w (command stopped: %v)", context.Cause(ctx), err)
	}
	stdout.flush()
	stderr.flush()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() == c.SkipExitCode:
		return acquire.Skip(fmt.Sprintf("%s exited with %d: %s", c.Path, c.SkipExitCode, tail.String()))
	case errors.As(err, &exitErr):
		return fmt.Errorf("%s: %v: %s", c.Path, exitErr.ProcessState, tail.String())
	default:
		return fmt.Errorf("%s: %w", c.Path, err)
	}
}

// stop ends the command's process group: SIGTERM, then SIGKILL after the
// grace period. It returns the command's exit error.
func (c Command) stop(cmd *exec.Cmd, done <-chan error) error {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(c.Grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-done
	}
}

// running holds the process group ids of the commands running now.
var running sync.Map

// KillCommands sends SIGKILL to the process group of every command this
// process is running. A program that must exit at once (a second SIGTERM)
// calls it first, so no command outlives it unsupervised: their slots'
// leases then expire and another process redoes them.
func KillCommands() {
	running.Range(func(pgid, _ any) bool {
		_ = syscall.Kill(-pgid.(int), syscall.SIGKILL)
		return true
	})
}

func slotEnv(s acquire.Slot) []string {
	return []string{
		"ALMANAC_NAME=" + s.Name,
		"ALMANAC_INTERVAL=" + s.Interval.String(),
		"ALMANAC_SLOT=" + s.Slot.String(),
		"ALMANAC_SLOT_START=" + slot.FormatTime(s.Start),
		"ALMANAC_SLOT_END=" + slot.FormatTime(s.End),
		"ALMANAC_ATTEMPT=" + strconv.Itoa(s.Attempt),
		"ALMANAC_FENCE=" + strconv.FormatInt(s.Fence, 10),
		"ALMANAC_GENERATION=" + strconv.FormatInt(s.Generation, 10),
		"ALMANAC_KEY=" + s.Key(),
		"ALMANAC_COMPUTATION_KEY=" + s.ComputationKey(),
	}
}

// lineWriter writes whole lines to w, each prefixed. Partial lines wait
// for their newline (or flush).
type lineWriter struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex
	buf    []byte
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	if lw.w == nil {
		return len(p), nil
	}
	lw.buf = append(lw.buf, p...)
	for {
		i := bytes.IndexByte(lw.buf, '\n')
		if i < 0 {
			break
		}
		lw.emit(lw.buf[:i+1])
		lw.buf = lw.buf[i+1:]
	}
	return len(p), nil
}

func (lw *lineWriter) flush() {
	if lw.w != nil && len(lw.buf) > 0 {
		lw.emit(append(lw.buf, '\n'))
		lw.buf = nil
	}
}

func (lw *lineWriter) emit(line []byte) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, _ = lw.w.Write(append([]byte(lw.prefix), line...))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.TrimSpace(t.buf)) }
