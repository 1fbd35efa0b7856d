package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// cliBinary is the CLI built once per test binary by buildAlmanac, in a
// directory TestMain removes.
var cliBinary struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildAlmanac returns the CLI built from this directory, building it on
// first use. Tests share it and must not change it.
func buildAlmanac(t *testing.T) string {
	t.Helper()
	cliBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "almanac-cli-test-")
		if err != nil {
			cliBinary.err = err
			return
		}
		cliBinary.dir = dir
		// Readable by every user: a test runs it as an unprivileged one.
		if err := os.Chmod(dir, 0o755); err != nil {
			cliBinary.err = err
			return
		}
		bin := filepath.Join(dir, "almanac")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			cliBinary.err = fmt.Errorf("build the CLI: %w\n%s", err, out)
			return
		}
		cliBinary.path = bin
	})
	if cliBinary.err != nil {
		t.Fatal(cliBinary.err)
	}
	return cliBinary.path
}

// cliTests runs the package's tests, then removes the CLI they shared.
type cliTests struct{ m *testing.M }

func (c cliTests) Run() int {
	code := c.m.Run()
	if cliBinary.dir != "" {
		_ = os.RemoveAll(cliBinary.dir)
	}
	return code
}

// process is a running almanac.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *bytes.Buffer // read them once the process is done
	errW           *syncWriter
	done           chan struct{}
	err            error
}

// stderrSoFar returns what the running process wrote to stderr so far.
func (p *process) stderrSoFar() string {
	p.errW.mu.Lock()
	defer p.errW.mu.Unlock()
	return p.stderr.String()
}

func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return startEnv(t, []string{"DATABASE_URL=" + pgtest.URL(t)}, bin, args...)
}

// startEnv starts bin with this process's environment and env.
func startEnv(t *testing.T, env []string, bin string, args ...string) *process {
	t.Helper()
	return startIn(t, "", env, bin, args...)
}

// startIn starts bin in dir (empty: the current directory) with this
// process's environment and env.
func startIn(t *testing.T, dir string, env []string, bin string, args ...string) *process {
	t.Helper()
	return startCmd(t, func(cmd *exec.Cmd) { cmd.Dir = dir }, env, bin, args...)
}

// startCmd starts bin with this process's environment and env, once setup
// has adjusted the rest (directory, credentials, descriptors).
func startCmd(t *testing.T, setup func(*exec.Cmd), env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	setup(p.cmd)
	p.cmd.Env = append(os.Environ(), env...)
	p.errW = &syncWriter{w: p.stderr}
	p.cmd.Stdout, p.cmd.Stderr = &syncWriter{w: p.stdout}, p.errW
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("almanac did not exit within %s; stderr:\n%s", timeout, p.stderr)
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func migrated(t *testing.T) string {
	schema := freshSchema(t, "cli_run_")
	requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
	return schema
}

func dbCount(t *testing.T, schema, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), sqlschema.Render(sql, schema), args...).Scan(&n))
	return n
}

// waitFor waits, up to timeout, for cond: a state another process owns (a
// file it writes, rows it commits, a port it opens), which sends the test no
// event, so it is looked at every 50 ms. The timeout is generous, never a
// measurement: a process's exit, which does send one, is waited for with
// proc.WaitExit instead.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readPIDs waits until the file at path holds a whole line (a shell's
// "echo ... > file" creates the file before it writes it) and returns the
// pids on it.
func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	var line string
	waitFor(t, "a line in "+path, 20*time.Second, func() bool {
		raw, err := os.ReadFile(path)
		line = string(raw)
		return err == nil && strings.HasSuffix(line, "\n")
	})
	var pids []int
	for _, f := range strings.Fields(line) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err, "%q", line)
		pids = append(pids, pid)
	}
	return pids
}

func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}
