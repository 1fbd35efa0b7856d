//go:build linux

package proc

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitExit: a running process is alive and outlasts a short wait; once
// killed, the wait returns (it exits as a zombie until reaped), and a pid
// that is gone returns at once.
func TestWaitExit(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	require.True(t, Alive(pid))
	require.Error(t, WaitExit(pid, 10*time.Millisecond), "sleep 60 is still running")

	require.NoError(t, cmd.Process.Kill())
	require.NoError(t, WaitExit(pid, 10*time.Second), "a killed process has exited, reaped or not")
	require.False(t, Alive(pid))
	_ = cmd.Wait()
	require.NoError(t, WaitExit(pid, 0), "a reaped pid is gone")
}
