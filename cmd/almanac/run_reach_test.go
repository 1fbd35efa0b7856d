//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// sharedDir returns a temporary directory every user may use: the
// unprivileged user that runs almanac in these tests writes there.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o777))
	return dir
}

// unprivileged returns credentials without CAP_SYS_PTRACE: those of nobody
// when the tests run as root (which may read any process's memory and
// environment, dumpable or not), else none (this user's own).
func unprivileged(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid := 65534, 65534 // nobody's ids on most systems
	if u, err := user.Lookup("nobody"); err == nil {
		uid, err = strconv.Atoi(u.Uid)
		require.NoError(t, err)
		gid, err = strconv.Atoi(u.Gid)
		require.NoError(t, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// TestRunHidesAlmanacFromItsCommand: a command running as almanac's own
// user reads the environment and command line of its parent (the
// supervisor) and grandparent (almanac): it finds no password, because
// both are not dumpable.
func TestRunHidesAlmanacFromItsCommand(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := sharedDir(t)
	job := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(job, []byte(`#!/bin/sh
pid=$$
for generation in supervisor almanac; do
  # "pid (comm) state ppid ...", comm may hold spaces
  pid=$(sed 's/.*) //' /proc/$pid/stat | cut -d' ' -f2)
  echo "ancestor $pid"
  if tr '\0' '\n' < /proc/$pid/environ; then echo "environ of $pid readable"; else echo "environ of $pid unreadable"; fi
  tr '\0' ' ' < /proc/$pid/cmdline; echo
done > "`+dir+`/seen" 2>&1
`), 0o755))
	env := []string{"DATABASE_URL=" + withPassword(t, "s3cret"), "PGPASSWORD=s3cret"}
	creds := unprivileged(t)
	p := startCmd(t, func(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Credential: creds} }, env, bin,
		"--schema", schema, "run", "reach", "--interval", "PT1M", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z",
		"--once", "--", job)
	require.Equal(t, 0, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	raw, err := os.ReadFile(dir + "/seen")
	require.NoError(t, err)
	seen := string(raw)
	require.NotContains(t, seen, "s3cret")
	var ancestors []string
	for _, line := range strings.Split(seen, "\n") {
		if pid, ok := strings.CutPrefix(line, "ancestor "); ok {
			ancestors = append(ancestors, pid)
		}
	}
	require.Len(t, ancestors, 2, "%s", seen)
	require.Equal(t, strconv.Itoa(p.cmd.Process.Pid), ancestors[1], "the supervisor, then almanac: %s", seen)
	for _, pid := range ancestors {
		require.Contains(t, seen, fmt.Sprintf("environ of %s unreadable", pid))
	}
}

// TestRunKeepsInheritedDescriptors: almanac started with a secret open
// without close-on-exec on descriptor 7 (as a shell's 7</secret gives it)
// does not pass it on to the command.
func TestRunKeepsInheritedDescriptors(t *testing.T) {
	t.Parallel() // its own schema and processes
	bin := buildAlmanac(t)
	schema := migrated(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("top secret\n"), 0o600))
	f, err := os.Open(secret)
	require.NoError(t, err)
	defer f.Close()
	job := script(t, `if [ -e /proc/$$/fd/7 ]; then echo "fd 7 open: $(cat <&7)"; else echo "fd 7 closed"; fi > "`+dir+`/seen"`)
	p := startCmd(t, func(cmd *exec.Cmd) { cmd.ExtraFiles = []*os.File{nil, nil, nil, nil, f} }, []string{"DATABASE_URL=" + pgtest.URL(t)}, bin,
		"--schema", schema, "run", "fds", "--interval", "PT1M", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z",
		"--once", "--", job)
	require.Equal(t, 0, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	seen, err := os.ReadFile(dir + "/seen")
	require.NoError(t, err)
	require.Equal(t, "fd 7 closed\n", string(seen))
}
