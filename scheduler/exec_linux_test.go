//go:build linux

package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/internal/testkit/pgtest"
	"github.com/almanacdev/almanac/internal/testkit/proc"
)

// TestCommandKillsItsSupervisor: a child of the command kills the
// supervisor, then sleeps. Nothing of the command's process tree lives on,
// and the slot's failure says what happened.
func TestCommandKillsItsSupervisor(t *testing.T) {
	db := pgtest.New(t)
	pids := filepath.Join(t.TempDir(), "pids")
	// The child writes its shell's pid and its own before it kills the
	// supervisor, the shell's parent.
	script := writeScript(t, `echo "the supervisor is $PPID" >&2
sh -c 'echo "$PPID $$" > "`+pids+`.tmp"; mv "`+pids+`.tmp" "`+pids+`"; kill -KILL '$PPID'; exec sleep 60' &
wait
`)
	require.Equal(t, acquire.Failed, runCommand(t, db, Command{Path: script}))
	raw, err := os.ReadFile(pids)
	require.NoError(t, err)
	var sh, child int
	_, err = fmt.Sscan(string(raw), &sh, &child)
	require.NoError(t, err, "%q", raw)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // should it have survived
	for _, pid := range []int{sh, child} {
		require.NoError(t, proc.WaitExit(pid, 5*time.Second))
	}
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM {{schema}}.slot WHERE fail_count = 1 AND message LIKE $1`,
		script+": the supervisor was killed (signal: killed); the command's process group was killed: the supervisor is %"))
}
