//go:build unix

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// init turns a process started by Start into the supervisor, before any
// importing package is initialized and before main runs.
func init() {
	if len(os.Args) < 3 || os.Args[0] != supervisorArg0 || os.Getenv(supervisorEnv) != "1" {
		return
	}
	// The command's parent-death signal fires when the thread that forked
	// it ends: fork from this one, the main thread, which lives as long as
	// the process.
	runtime.LockOSThread()
	// syscall.Exit, not os.Exit: there is nothing to flush, and a
	// race-instrumented build (a test binary) sleeps a second in os.Exit.
	syscall.Exit(supervise(os.Args[1], os.Args[2:]))
}

// supervise runs the command path with argv and reports its status on the
// status pipe. It returns the supervisor's exit code.
func supervise(path string, argv []string) int {
	// Nothing but stdin, stdout and stderr reaches the command: not the
	// pipes (a descendant holding the status pipe would delay Wait, or
	// write a status), not what the program inherited.
	closeInherited()
	// Nor can the command read or trace the supervisor, which would let it
	// write a status of its choosing.
	undumpable()
	lifeline := os.NewFile(lifelineFD, "lifeline")
	status := os.NewFile(statusFD, "status")
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, supervisorEnv+"=") })

	becomeSubreaper()
	forward := make(chan os.Signal, 4)
	signal.Notify(forward, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)

	var st Status
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: commandAttr()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "almanac: cannot start %s: %v\n", argv[0], err)
		st.Code = 126
		if errors.Is(err, syscall.ENOENT) {
			st.Code = 127
		}
	} else {
		// The program kills this process group should the supervisor be
		// killed before it reports a status.
		_, _ = fmt.Fprintf(status, "pid %d\n", pid)
		dead := make(chan struct{})
		go func() {
			// Only EOF (or an error) can come: nothing writes to it.
			var b [1]byte
			_, _ = lifeline.Read(b[:])
			close(dead)
		}()
		st = watch(pid, forward, child, dead)
	}
	if _, err := fmt.Fprintln(status, st.encode()); err != nil {
		return 1 // the program is gone; nobody reads the status
	}
	return 0
}

// watch waits for the command pid to end, forwarding signals to its
// process group while it runs. When it ends or the lifeline closes, it
// kills everything that is left: the command's process group while the
// command is not reaped (only then can its group id not have been reused),
// and every child the supervisor has, which on Linux includes every orphaned
// descendant. It returns when it has no children left.
func watch(pid int, forward, child <-chan os.Signal, dead <-chan struct{}) Status {
	var st Status
	reaped, killing := false, false
	for {
		// Reap whatever ended: the command, and (on Linux) orphans
		// re-parented here.
		none := false
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.ECHILD) {
				none = true
				break
			}
			if err != nil || got <= 0 {
				break
			}
			if got == pid {
				st, reaped, killing = statusOf(ws), true, true // what the command left behind dies with it
			}
		}
		if reaped && none {
			return st
		}
		if killing {
			if !reaped {
				_ = unix.Kill(-pid, unix.SIGKILL)
			}
			// Nothing was reaped since children listed them: their pids
			// cannot have been reused.
			for _, c := range children() {
				_ = unix.Kill(c, unix.SIGKILL)
			}
		}
		select {
		case sig := <-forward:
			if !reaped {
				_ = unix.Kill(-pid, sig.(syscall.Signal))
			}
		case <-dead:
			killing, dead = true, nil
		case <-child:
		}
	}
}

// statusOf is the Status a wait status describes.
func statusOf(ws unix.WaitStatus) Status {
	if ws.Signaled() {
		return Status{Code: -1, Signal: syscall.Signal(ws.Signal()), CoreDumped: ws.CoreDump()}
	}
	return Status{Code: ws.ExitStatus()}
}
