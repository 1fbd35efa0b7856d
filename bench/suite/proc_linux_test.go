//go:build linux

package suite

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// A command name may hold spaces and parentheses: the fields are counted
// from the last closing one.
func TestParseStat(t *testing.T) {
	st, err := parseStat("4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 31 7 5 20 0 1 0 1000 0 0\n")
	require.NoError(t, err)
	require.Equal(t, procStat{ppid: 17, cpu: 281, reaped: 12}, st)

	_, err = parseStat("4242 no name S 17")
	require.Error(t, err)
	_, err = parseStat("4242 (short) S 17 1 2")
	require.Error(t, err)
}

func TestOwnProcess(t *testing.T) {
	ppid, err := parentPID(os.Getpid())
	require.NoError(t, err)
	require.Equal(t, os.Getppid(), ppid)
	rss, err := residentMiB(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, rss)
	_, err = processCPU(os.Getpid())
	require.NoError(t, err)
}
