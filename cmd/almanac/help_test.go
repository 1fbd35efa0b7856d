package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/almanacdev/almanac/internal/testkit/pgtest"
)

// allCommands returns every command of the tree, parents first.
func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}

// shellWords splits a command line as sh would, for the quoting the
// examples use: '...' and "..." without escapes.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case ' ', '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case '\'', '"':
			end := strings.IndexByte(line[i+1:], c)
			require.GreaterOrEqual(t, end, 0, "unbalanced quote in %q", line)
			word.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// TestHelpExamplesRun runs every example of every command's --help, as
// printed, against a fresh schema holding what the examples build on (the
// series they name, the scripts they run). None may be refused as bad
// input (exit 2). The sidecar examples that run until stopped are stopped
// once they log that they run.
func TestHelpExamplesRun(t *testing.T) {
	t.Parallel() // its own schema
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("an `almanac run` example runs python3: apt-get install -y python3")
	}
	bin := buildAlmanac(t)
	schema := migrated(t)
	requireOK(t, cli(t, "--schema", schema, "series", "add", "sensor_report", "--interval", "PT5M"))
	requireOK(t, cli(t, "--schema", schema, "series", "add", "billing", "--interval", "P1D", "--tz", "Europe/Berlin"))
	work := t.TempDir()
	for name, body := range map[string]string{"report.sh": "#!/bin/sh\n", "bill": "#!/bin/sh\n", "fill.py": "", "token": "c0ffee5e1a9b3d7f2e8c4a6b0d1f3e5a7c9b2d4f6e8a0c1e\n",
		"users": "alice@example.com 7b3e9d1f5a2c8e4b0d6f1a3c5e7b9d2f4a6c8e0b1d3f5a7c\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(work, name), []byte(body), 0o755))
	}

	examples := 0
	for _, c := range allCommands((&app{}).rootCommand()) {
		for _, line := range strings.Split(c.Example, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			examples++
			words := shellWords(t, strings.TrimSpace(line))
			require.Equal(t, "almanac", words[0], "%q", line)
			args := append([]string{"--schema", schema}, words[1:]...)
			env := []string{"DATABASE_URL=" + pgtest.URL(t)}
			var code int
			var stderr string
			switch {
			case c.Name() == "serve":
				// On a free port: the examples' ports may be taken.
				p := startIn(t, work, env, bin, append(args, "--http", "127.0.0.1:0")...)
				waitFor(t, line+" to serve", time.Minute, func() bool {
					select {
					case <-p.done:
						return true
					default:
						return strings.Contains(p.stderrSoFar(), "serving the coverage page")
					}
				})
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				code, stderr = p.wait(t, time.Minute), p.stderr.String()
			case c.Name() == "run" && !strings.Contains(line, "--once"):
				p := startIn(t, work, env, bin, args...)
				waitFor(t, line+" to start", time.Minute, func() bool {
					select {
					case <-p.done:
						return true
					default:
						return strings.Contains(p.stderrSoFar(), "sidecar starting")
					}
				})
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				code, stderr = p.wait(t, time.Minute), p.stderr.String()
			default:
				p := startIn(t, work, env, bin, args...)
				code, stderr = p.wait(t, time.Minute), p.stderr.String()
			}
			require.NotEqual(t, exitUsage, code, "%s: %s", line, stderr)
		}
	}
	require.GreaterOrEqual(t, examples, 20)
}

// TestHelpCitesNoMissingFile: a help text may point to a document only if
// it is in the repository.
func TestHelpCitesNoMissingFile(t *testing.T) {
	doc := regexp.MustCompile(`[\w./-]+\.md\b`)
	for _, c := range allCommands((&app{}).rootCommand()) {
		text := c.Short + "\n" + c.Long + "\n" + c.Example + "\n" + c.Flags().FlagUsages()
		for _, name := range doc.FindAllString(text, -1) {
			_, err := os.Stat(filepath.Join("..", "..", name))
			require.NoError(t, err, "%q cites %s", c.CommandPath(), name)
		}
	}
}
