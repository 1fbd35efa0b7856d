//go:build linux

package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/almanacdev/almanac/internal/testkit/proc"
)

// buffer is a bytes.Buffer safe for the supervisor's output copying and
// the test's reads.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func shell(script string) Spec {
	return Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}}
}

func run(t *testing.T, spec Spec) Status {
	t.Helper()
	p, err := Start(spec)
	require.NoError(t, err)
	st, err := p.Wait()
	require.NoError(t, err)
	return st
}

func TestStatus(t *testing.T) {
	require.Equal(t, "exit status 0", run(t, shell("exit 0")).String())
	require.Equal(t, Status{Code: 3}, run(t, shell("exit 3")))
	require.Equal(t, Status{Code: -1, Signal: syscall.SIGKILL}, run(t, shell("kill -KILL $$")))
	require.Equal(t, "signal: terminated", run(t, shell("kill -TERM $$")).String())
}

func TestOutputEnvDirArgs(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr buffer
	spec := shell(`echo "$0 $1 $(pwd) [$ALMANAC_SUPERVISOR] $GREETING"; echo oops >&2`)
	spec.Args = append(spec.Args, "job", "arg1")
	spec.Env = append(spec.Env, "GREETING=hello")
	spec.Dir, spec.Stdout, spec.Stderr = dir, &stdout, &stderr
	require.Equal(t, 0, run(t, spec).Code)
	require.Equal(t, "job arg1 "+dir+" [] hello\n", stdout.String(), "the supervisor's marker does not reach the command")
	require.Equal(t, "oops\n", stderr.String())
}

func TestStartFailure(t *testing.T) {
	var stderr buffer
	st := run(t, Spec{Path: "/nonexistent/job", Args: []string{"./job"}, Stderr: &stderr})
	require.Equal(t, 127, st.Code)
	require.Contains(t, stderr.String(), "almanac: cannot start ./job: no such file or directory")

	dir := t.TempDir()
	stderr = buffer{}
	st = run(t, Spec{Path: dir, Args: []string{"dir"}, Stderr: &stderr})
	require.Equal(t, 126, st.Code)
	require.Contains(t, stderr.String(), "cannot start dir")
}

// family starts, under a supervisor, a command whose shell has a child in
// its process group and a grandchild that left it (setsid), and returns
// the three pids once all run.
func family(t *testing.T, p **Process, tail string) (shellPID, child, escaped int) {
	t.Helper()
	pids := filepath.Join(t.TempDir(), "pids")
	startFamily(t, p, pids, tail)
	return readPIDs(t, pids)
}

// startFamily starts the command of family, which writes its pids to pids.
func startFamily(t *testing.T, p **Process, pids, tail string) {
	t.Helper()
	spec := shell(`sleep 60 & c=$!; setsid sh -c 'echo $$ > "` + pids + `.esc"; exec sleep 60' & 
while [ ! -s "` + pids + `.esc" ]; do sleep 0.01; done
echo "$$ $c $(cat "` + pids + `.esc")" > "` + pids + `.tmp"; mv "` + pids + `.tmp" "` + pids + `"
` + tail)
	var err error
	*p, err = Start(spec)
	require.NoError(t, err)
}

func readPIDs(t *testing.T, path string) (a, b, c int) {
	t.Helper()
	var raw []byte
	require.Eventually(t, func() bool {
		var err error
		raw, err = os.ReadFile(path)
		return err == nil
	}, 20*time.Second, 5*time.Millisecond, "the command wrote its pids")
	_, err := fmt.Sscan(string(raw), &a, &b, &c)
	require.NoError(t, err, "%q", raw)
	return a, b, c
}

func requireAlive(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		require.True(t, proc.Alive(pid), "pid %d runs", pid)
	}
}

// requireGone waits, up to within, for every pid to be gone.
func requireGone(t *testing.T, within time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		require.NoError(t, proc.WaitExit(pid, time.Until(deadline)))
	}
}

func TestKillKillsEveryDescendant(t *testing.T) {
	var p *Process
	sh, child, escaped := family(t, &p, "wait")
	requireAlive(t, sh, child, escaped)
	p.Kill()
	st, err := p.Wait()
	require.NoError(t, err)
	require.Equal(t, syscall.SIGKILL, st.Signal)
	// Wait returned after the supervisor reaped them all.
	for _, pid := range []int{sh, child, escaped} {
		require.False(t, proc.Alive(pid), "pid %d", pid)
	}
	p.Kill() // harmless after Wait
}

func TestLeftoversDieWithTheCommand(t *testing.T) {
	var p *Process
	// Both sleep for a minute after the shell exited: gone when Wait
	// returns, they were killed.
	_, child, escaped := family(t, &p, "exit 4")
	st, err := p.Wait()
	require.NoError(t, err)
	require.Equal(t, 4, st.Code)
	require.False(t, proc.Alive(child))
	require.False(t, proc.Alive(escaped))
}

func TestTerminateReachesTheGroup(t *testing.T) {
	var stdout buffer
	spec := shell(`trap 'echo "got TERM"; exit 5' TERM; echo ready; sleep 60 & wait`)
	spec.Stdout = &stdout
	p, err := Start(spec)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "ready") }, 20*time.Second, 5*time.Millisecond)
	p.Terminate()
	st, err := p.Wait()
	require.NoError(t, err)
	require.Equal(t, 5, st.Code)
	require.Equal(t, "ready\ngot TERM\n", stdout.String())
	p.Terminate() // harmless after Wait
}

// TestKillAFrozenSupervisor: a supervisor that does not react to its
// lifeline (SIGSTOP) is killed after killTimeout, and the command dies by
// its parent-death signal.
func TestKillAFrozenSupervisor(t *testing.T) {
	defer func(d time.Duration) { killTimeout = d }(killTimeout)
	killTimeout = 100 * time.Millisecond
	var p *Process
	sh, _, _ := family(t, &p, "wait")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	p.Kill()
	_, err := p.Wait()
	require.ErrorContains(t, err, "the supervisor was killed (signal: killed); the command's process group was killed")
	requireGone(t, 5*time.Second, sh)
}

// TestHelperProgram is not a test: TestProgramKilled runs the test binary
// as a program that supervises a command and is then killed.
func TestHelperProgram(t *testing.T) {
	pids := os.Getenv("SUPERVISOR_TEST_PIDS")
	if pids == "" {
		return
	}
	var p *Process
	startFamily(t, &p, pids, "wait")
	select {} // until killed
}

// TestProgramKilled: SIGKILL the program while its command runs; the
// command, its child and the grandchild that left the process group die
// within a second.
func TestProgramKilled(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperProgram$")
	helper.Env = append(os.Environ(), "SUPERVISOR_TEST_PIDS="+pids)
	require.NoError(t, helper.Start())
	sh, child, escaped := readPIDs(t, pids)
	requireAlive(t, sh, child, escaped)
	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	requireGone(t, time.Second, sh, child, escaped)
}

// TestInheritedDescriptorsStayBehind: a descriptor the program holds
// without close-on-exec (as a shell's 7</secret gives one) does not reach
// the command, nor do the supervisor's pipes.
func TestInheritedDescriptorsStayBehind(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("top secret\n"), 0o600))
	f, err := os.Open(secret)
	require.NoError(t, err)
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd())) // dup does not set close-on-exec
	require.NoError(t, err)
	defer unix.Close(fd)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.Zero(t, flags&unix.FD_CLOEXEC, "the descriptor is inherited by what this process starts")

	var stdout buffer
	spec := shell(fmt.Sprintf(`cat <&%d; for fd in %d %d %d; do [ -e /proc/$$/fd/$fd ] && echo "fd $fd open"; done; echo end`,
		fd, fd, lifelineFD, statusFD))
	spec.Stdout = &stdout
	require.Equal(t, Status{Code: 0}, run(t, spec))
	require.Equal(t, "end\n", stdout.String())
}

// TestCommandKillsItsSupervisor: a child of the command kills the
// supervisor, then sleeps. The command dies by its parent-death signal and
// the program kills the command's process group, so the child does not
// live on; Wait says what happened.
func TestCommandKillsItsSupervisor(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	// The child writes its shell's pid, its own and the supervisor's before
	// it kills the supervisor.
	p, err := Start(shell(`supervisor=$PPID
sh -c 'echo "$PPID $$ '$supervisor'" > "` + pids + `.tmp"; mv "` + pids + `.tmp" "` + pids + `"; kill -KILL '$supervisor'; exec sleep 60' &
wait`))
	require.NoError(t, err)
	_, err = p.Wait()
	require.ErrorContains(t, err, "the supervisor was killed (signal: killed); the command's process group was killed")
	sh, child, supervisor := readPIDs(t, pids)
	require.Equal(t, p.cmd.Process.Pid, supervisor)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // should it have survived
	requireGone(t, 5*time.Second, sh, child)
}
