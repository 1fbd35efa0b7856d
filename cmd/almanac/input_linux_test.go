//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// TestMigrateDownAsksOnATerminal runs the binary with a pseudo-terminal as
// its standard input: down says what it will drop on stderr, asks, and
// drops only after "yes".
func TestMigrateDownAsksOnATerminal(t *testing.T) {
	bin := buildAlmanac(t)
	for _, tt := range []struct {
		answer string
		code   int
		kept   bool
	}{{"no", exitProblem, true}, {"", exitProblem, true}, {"yes", exitOK, false}} {
		schema := freshSchema(t, "cli_tty_")
		requireOK(t, cli(t, "--schema", schema, "migrate", "up"))
		terminal, input := openPTY(t)
		cmd := exec.Command(bin, "--schema", schema, "migrate", "down")
		cmd.Env = cleanEnv("DATABASE_URL=" + pgtest.URL(t))
		cmd.Stdin = input
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		require.NoError(t, input.Close())

		// Wait for the question, then answer it.
		var asked []byte
		buf := make([]byte, 512)
		for !bytes.HasSuffix(asked, []byte("Type yes to go on: ")) {
			n, err := stderr.Read(buf)
			require.NoError(t, err, "stderr so far: %q", asked)
			asked = append(asked, buf[:n]...)
		}
		require.Contains(t, string(asked), `in schema "`+schema+`"`)
		require.Contains(t, string(asked), "cannot be undone")
		_, err = terminal.Write([]byte(tt.answer + "\n"))
		require.NoError(t, err)
		rest, err := io.ReadAll(stderr)
		require.NoError(t, err)
		err = cmd.Wait()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, tt.code, code, "answer %q: %s%s", tt.answer, asked, rest)
		var exists bool
		require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
			"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
		require.Equal(t, tt.kept, exists, "answer %q", tt.answer)
		if tt.kept {
			require.Contains(t, string(rest), "not confirmed; nothing was changed")
		} else {
			require.Contains(t, stdout.String(), "removed almanac from schema")
		}
	}
}

// openPTY opens a pseudo-terminal: what is written to terminal arrives on
// input, which reads as a terminal (isatty) in the process it is given to.
func openPTY(t *testing.T) (terminal, input *os.File) {
	t.Helper()
	terminal, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err, "pseudo-terminals are needed (a mounted /dev/pts)")
	t.Cleanup(func() { terminal.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(terminal.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(terminal.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	input, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	return terminal, input
}
