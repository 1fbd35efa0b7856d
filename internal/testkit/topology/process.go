//go:build linux

package topology

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/almanacdev/almanac/internal/demo/pgcluster"
)

// dirPrefix names the components' directories under os.TempDir(). Each
// holds a file "owner" with the pid of the process that created it and a
// file "groups" with the process groups started in it, one a line.
const dirPrefix = "almanac-topology-"

// stopGrace is how long a server gets to exit after SIGTERM before its
// process group is killed.
const stopGrace = 10 * time.Second

// workDir is a component's directory, owned by the user its servers run as.
type workDir struct {
	path string
	cred *syscall.Credential // nil: run as ourselves
}

func newWorkDir(kind string) (*workDir, error) {
	reapOrphans()
	w := &workDir{}
	if os.Geteuid() == 0 {
		var err error
		if w.cred, err = pgcluster.ServerUser(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", dirPrefix+kind+"-")
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	w.path = dir
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("topology: %w", err)
	}
	if err := w.handOver(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return w, nil
}

// handOver gives path to the servers' user.
func (w *workDir) handOver(path string) error {
	if w.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(w.cred.Uid), int(w.cred.Gid)); err != nil {
		return fmt.Errorf("topology: chown %s: %w", path, err)
	}
	return nil
}

// mkdir creates a directory in the work directory for the servers' user.
func (w *workDir) mkdir(name string) (string, error) {
	path := filepath.Join(w.path, name)
	if err := os.Mkdir(path, 0o700); err != nil {
		return "", fmt.Errorf("topology: %w", err)
	}
	return path, w.handOver(path)
}

// writeFile writes a file of the work directory, readable by the servers'
// user.
func (w *workDir) writeFile(name, text string) (string, error) {
	path := filepath.Join(w.path, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return "", fmt.Errorf("topology: %w", err)
	}
	return path, w.handOver(path)
}

// command prepares a program to run as the servers' user in the work
// directory, with env as its whole environment.
func (w *workDir) command(path string, args []string, env []string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Dir = w.path
	cmd.Env = env
	if w.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: w.cred}
	}
	return cmd
}

// remove deletes the work directory.
func (w *workDir) remove() error {
	if err := os.RemoveAll(w.path); err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	return nil
}

// daemon is a server process leading its own process group.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // from Wait, valid once done is closed
}

// start starts a server in its own process group, with its output in
// <name>.log, and records the group so that it can be ended even if we die.
func (w *workDir) start(name, path string, args, env []string) (*daemon, error) {
	logPath := filepath.Join(w.path, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	defer logFile.Close()
	cmd := w.command(path, args, env)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("topology: start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	if err := appendLine(filepath.Join(w.path, "groups"), strconv.Itoa(cmd.Process.Pid)); err != nil {
		_ = d.stop()
		return nil, fmt.Errorf("topology: %w", err)
	}
	return d, nil
}

// exited reports whether the server's leading process has exited.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the server's process group, then SIGKILL after
// stopGrace, and waits for the leading process; what is left of the group
// is killed too.
func (d *daemon) stop() error {
	pgid := d.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-d.done
	}
	// Children that outlived the leader (a postmaster's backends exit by
	// themselves when it dies).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// logTail returns the end of the server's output, for error messages.
func (d *daemon) logTail() string { return fileTail(d.log) }

func fileTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const keep = 3 << 10
	if len(b) > keep {
		b = b[len(b)-keep:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(bytes.TrimSpace(b))
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	return errors.Join(err, f.Close())
}

// spawnCalls carries process starts to one goroutine locked to its OS
// thread for the life of the process: Linux delivers the parent-death
// signal when the thread that forked the child exits, and the Go runtime
// may end other threads.
var (
	spawnOnce  sync.Once
	spawnCalls chan spawnCall
)

type spawnCall struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCalls = make(chan spawnCall)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as we do
			for c := range spawnCalls {
				c.done <- c.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCalls <- spawnCall{cmd, done}
	return <-done
}

// reapOrphans ends the servers of work directories whose owner died without
// cleaning up, and removes those directories: the recorded process groups,
// and any process whose working directory is in the directory (a
// postmaster started by pg_ctl leaves our group, but works in its data
// directory). A group is only signalled while one of its processes
// provably belongs to the directory (its working directory or command line
// is in it), so a reused pid is never hit.
func reapOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // being created right now, or not ours
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processExists(owner) {
			continue
		}
		groups, _ := os.ReadFile(filepath.Join(dir, "groups"))
		for _, line := range strings.Fields(string(groups)) {
			if pgid, err := strconv.Atoi(line); err == nil && groupIn(pgid, dir) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
		// Servers that detached from our groups (pg_ctl starts a
		// postmaster in a session of its own) still work in the directory.
		for _, pid := range workingIn(dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if waitGone(dir) {
			_ = os.RemoveAll(dir)
		}
	}
}

// waitGone waits until no process of a recorded group and none working in
// dir is left, and reports whether that happened.
func waitGone(dir string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(workingIn(dir)) == 0 && !anyGroupIn(dir) {
			return true
		}
	}
	return false
}

func anyGroupIn(dir string) bool {
	groups, _ := os.ReadFile(filepath.Join(dir, "groups"))
	for _, line := range strings.Fields(string(groups)) {
		if pgid, err := strconv.Atoi(line); err == nil && groupIn(pgid, dir) {
			return true
		}
	}
	return false
}

// workingIn lists the live processes whose working directory is dir or
// below it.
func workingIn(dir string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join(p, "cwd")); err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// groupIn reports whether a live process of group pgid works in dir.
func groupIn(pgid int, dir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		stat, err := os.ReadFile(filepath.Join(p, "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesized command: state ppid pgrp …
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 3 || fields[2] != strconv.Itoa(pgid) || fields[0] == "Z" {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		if strings.HasPrefix(cwd, dir) || bytes.Contains(cmdline, []byte(dir)) {
			return true
		}
	}
	return false
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
