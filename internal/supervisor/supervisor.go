// Package supervisor runs a command so that it, and everything it starts,
// dies with the program that started it, however that program ends.
//
// Start does not start the command itself but a supervisor: a copy of the
// running program (re-executed from its own binary; this package's init
// function turns that copy into the supervisor before main runs and before
// the packages that import this one are initialized). The supervisor starts
// the command in a process group of its own, forwards SIGTERM, SIGINT,
// SIGHUP and SIGQUIT to that group, and holds one end of a pipe, the
// lifeline, whose other end only the starting program holds. The lifeline
// closes when the program calls Process.Kill or ends in any way, SIGKILL and
// crashes included: the kernel closes a dead process's files. The supervisor
// then kills the command's process group with SIGKILL, waits for everything
// to die, reports the command's status and exits.
//
// On Linux the supervisor also
//
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER): every descendant of the
//     command whose parent dies is re-parented to it, including those that
//     left the process group or the session (setsid, daemons that fork
//     twice), and it kills and reaps them all;
//   - kills what the command leaves behind when it exits: the command's
//     work ends when it does;
//   - gives the command a parent-death signal (SIGKILL): should the
//     supervisor itself be killed, the command dies with it. The signal is
//     tied to the thread that forked, so the supervisor forks from its main
//     thread, locked in init, which lives as long as the process.
//
// Should the supervisor be killed before it reports a status (by a
// descendant of the command, which runs as the same user, or by the
// out-of-memory killer), the program kills the command's process group as
// soon as the supervisor is gone, and Wait's error says both.
//
// What reaches the command: its arguments, the environment and directory
// of its Spec, and standard input, output and error; every other
// descriptor, inherited by the program or opened by the supervisor, is
// closed on exec. On Linux, Start makes the program non-dumpable
// (PR_SET_DUMPABLE 0) when it starts its first command, and the supervisor
// makes itself non-dumpable too: a process of the same user, the command
// included, cannot read their /proc/<pid>/environ, mem or fd, nor ptrace
// them. That flag also means no core dumps, /proc/<pid> files owned by
// root, and debuggers, strace or perf attaching only as root. It does not
// hide /proc/<pid>/cmdline, which every local user can read.
//
// Limits: a descendant that another service started on the command's
// behalf (systemd-run, at, a container runtime) is not a descendant and is
// not killed. If the supervisor itself is killed, descendants that left
// the command's process group live on. On other Unix systems there is no
// subreaper, no parent-death signal and no non-dumpable flag: the process
// group is killed when the lifeline closes, but descendants that left the
// group survive, what the command leaves behind when it exits normally is
// not killed, and a process of the same user can read the program's
// environment. Windows is not supported (ErrUnsupported).
package supervisor

import (
	"errors"
	"fmt"
	"io"
	"syscall"
)

// ErrUnsupported is returned by Start and LookPath on systems where
// commands cannot be supervised (Windows).
var ErrUnsupported = fmt.Errorf("running a command under a supervisor needs a Unix system: %w", errors.ErrUnsupported)

// ErrCannotStart is wrapped by LookPath's errors: the command would fail
// to start.
var ErrCannotStart = errors.New("command cannot be started")

// Spec describes the command to run.
type Spec struct {
	// Path is the program, as LookPath resolved it.
	Path string
	// Args are the command's arguments, Args[0] the name it sees as its
	// own (usually the name it was given by).
	Args []string
	// Env is the command's whole environment (KEY=value).
	Env []string
	// Dir is its working directory; empty means the current one.
	Dir string
	// Stdout and Stderr receive its output. Nil discards it.
	Stdout, Stderr io.Writer
}

// Status is how a command ended.
type Status struct {
	// Code is the exit code, or -1 when a signal ended the command.
	Code int
	// Signal is the signal that ended the command, when Code is -1.
	Signal syscall.Signal
	// CoreDumped reports that the signal left a core dump.
	CoreDumped bool
}

// String says how the command ended, as os.ProcessState does: "exit status
// 3", "signal: killed".
func (s Status) String() string {
	if s.Code >= 0 {
		return fmt.Sprintf("exit status %d", s.Code)
	}
	text := "signal: " + s.Signal.String()
	if s.CoreDumped {
		text += " (core dumped)"
	}
	return text
}

// encode and decode carry a Status from the supervisor to the program.
func (s Status) encode() string {
	if s.Code >= 0 {
		return fmt.Sprintf("exit %d", s.Code)
	}
	core := 0
	if s.CoreDumped {
		core = 1
	}
	return fmt.Sprintf("signal %d %d", int(s.Signal), core)
}

func decodeStatus(text string) (Status, bool) {
	var code, sig, core int
	if n, err := fmt.Sscanf(text, "exit %d", &code); err == nil && n == 1 && code >= 0 {
		return Status{Code: code}, true
	}
	if n, err := fmt.Sscanf(text, "signal %d %d", &sig, &core); err == nil && n == 2 {
		return Status{Code: -1, Signal: syscall.Signal(sig), CoreDumped: core == 1}, true
	}
	return Status{}, false
}
