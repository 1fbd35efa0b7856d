//go:build linux

package suite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procUnsupported says why the CPU time and resident memory of processes
// cannot be read here; empty when they can.
const procUnsupported = ""

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat:
// 100 on every architecture Linux and Go share.
const clockTicks = 100

// procStat is what series-scale reads of /proc/<pid>/stat.
type procStat struct {
	ppid int
	// cpu is utime + stime, reaped cutime + cstime, both in ticks.
	cpu, reaped int64
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(string(b))
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// parseStat parses a line of /proc/<pid>/stat. The command name, second
// field, is in parentheses and may hold spaces and parentheses itself: the
// fields are counted from the last closing one.
func parseStat(line string) (procStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return procStat{}, errors.New("no command name")
	}
	// After the name: state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime …
	f := strings.Fields(line[i+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%d fields after the command name, expected at least 15", len(f))
	}
	var n [5]int64
	for k, field := range []int{1, 11, 12, 13, 14} {
		var err error
		if n[k], err = strconv.ParseInt(f[field], 10, 64); err != nil {
			return procStat{}, err
		}
	}
	return procStat{ppid: int(n[0]), cpu: n[1] + n[2], reaped: n[3] + n[4]}, nil
}

// processCPU returns the CPU time a live process has used (all its
// threads, user and system), in seconds.
func processCPU(pid int) (float64, error) {
	st, err := readStat(pid)
	return float64(st.cpu) / clockTicks, err
}

// serverCPU returns the CPU time of a PostgreSQL server, in seconds: its
// postmaster's, that of every live child (backends, background workers),
// and that of the children the postmaster has reaped (backends that
// disconnected, autovacuum workers that finished), so that the difference
// of two readings is the server's CPU in between.
func serverCPU(postmaster int) (float64, error) {
	pm, err := readStat(postmaster)
	if err != nil {
		return 0, err
	}
	ticks := pm.cpu + pm.reaped
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != postmaster {
			continue // gone meanwhile, or not the server's
		}
		ticks += st.cpu
	}
	return float64(ticks) / clockTicks, nil
}

// parentPID returns the parent of a live process.
func parentPID(pid int) (int, error) {
	st, err := readStat(pid)
	return st.ppid, err
}

// residentMiB returns a live process's resident set size (VmRSS), in MiB.
func residentMiB(pid int) (float64, error) {
	kb, ok := statusKB(pid, "VmRSS:")
	if !ok {
		return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return float64(kb) / 1024, nil
}

// loadAverage returns the machine's load average over the last minute, as
// /proc/loadavg writes it, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
