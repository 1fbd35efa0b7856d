//go:build linux

package topology

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/demo/pgcluster"
)

// Formation is a pg_auto_failover formation on 127.0.0.1: a monitor, and
// two PostgreSQL nodes kept by pg_autoctl, a primary and a standby with
// synchronous replication (pg_auto_failover's default for two nodes:
// synchronous_standby_names = ANY 1 (the standby)). Clients follow the
// primary with URL's multi-host connection string.
type Formation struct {
	dir     *workDir
	autoctl string
	env     []string
	monitor *daemon
	monPort int
	nodes   []*node

	mu sync.Mutex // serializes Failover
}

type node struct {
	name   string
	port   int
	pgdata string
	keeper *daemon
}

// NodeState is a node as the monitor sees it.
type NodeState struct {
	Name     string
	Port     int
	Reported string // the state the node's keeper last reported
	Goal     string // the state the monitor assigned
}

// formationTimeout bounds StartFormation and Failover when ctx has no
// deadline.
const formationTimeout = 2 * time.Minute

// StartFormation creates and starts a formation and returns once its
// primary and its synchronous standby are in place, or when ctx is done (2
// minutes if ctx has no deadline). The data directories are initialized
// without fsync, and run with fsync off: a throwaway formation survives
// process crashes and failovers, not machine crashes. Every socket of the
// formation is in its directory (pg_autoctl's nodes find their servers
// through PGHOST), and pg_autoctl's configuration and state files too.
//
// It fails with an error wrapping ErrMissing when pg_autoctl or the
// pgautofailover extension is not installed.
func StartFormation(ctx context.Context) (_ *Formation, err error) {
	binDir, err := pgcluster.Find()
	if err != nil {
		return nil, err
	}
	// A PATH entry may hold symbolic links to the installation (Debian
	// keeps pg_config and the extension's files beside the real ones).
	if pgctl, err := filepath.EvalSymlinks(filepath.Join(binDir, "pg_ctl")); err == nil {
		binDir = filepath.Dir(pgctl)
	}
	autoctl, err := requireAutoFailover(binDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefault(ctx, formationTimeout)
	defer cancel()
	dir, err := newWorkDir("formation")
	if err != nil {
		return nil, err
	}
	f := &Formation{dir: dir, autoctl: autoctl}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Destroy())
		}
	}()
	xdg, err := dir.mkdir("xdg")
	if err != nil {
		return nil, err
	}
	f.env = []string{
		"PATH=" + binDir + ":/usr/bin:/bin",
		"PGHOST=" + dir.path,
		"HOME=" + xdg,
		"XDG_CONFIG_HOME=" + xdg,
		"XDG_DATA_HOME=" + xdg,
		"XDG_RUNTIME_DIR=" + xdg,
		"LANG=C",
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
	}
	f.monPort = ports[0]
	f.nodes = []*node{
		{name: "node1", port: ports[1], pgdata: filepath.Join(dir.path, "node1")},
		{name: "node2", port: ports[2], pgdata: filepath.Join(dir.path, "node2")},
	}

	// The monitor and the first node are initialized by us, in parallel,
	// so that their sockets are in our directory; the second is a base
	// backup of the primary and inherits the setting.
	monData := filepath.Join(dir.path, "monitor")
	var wg sync.WaitGroup
	var initErrs [2]error
	for i, pgdata := range []string{monData, f.nodes[0].pgdata} {
		wg.Go(func() { initErrs[i] = f.initdb(ctx, binDir, pgdata) })
	}
	wg.Wait()
	if err := errors.Join(initErrs[:]...); err != nil {
		return nil, err
	}
	f.monitor, err = dir.start("monitor", autoctl, []string{"create", "monitor", "--pgdata", monData,
		"--pgport", strconv.Itoa(f.monPort), "--auth", "trust", "--no-ssl", "--hostname", "127.0.0.1",
		"--listen", "127.0.0.1", "--run"}, f.env)
	if err != nil {
		return nil, err
	}
	err = waitReady(ctx, f.monitor, func(ctx context.Context) error {
		_, err := f.States(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The monitor makes the first node to register the primary and the
	// next its standby. The standby is started as soon as the primary is
	// registered, and is created (a base backup) while the primary starts.
	for i, n := range f.nodes {
		n.keeper, err = dir.start(n.name, autoctl, []string{"create", "postgres", "--pgdata", n.pgdata,
			"--pgport", strconv.Itoa(n.port), "--auth", "trust", "--no-ssl", "--hostname", "127.0.0.1",
			"--listen", "127.0.0.1", "--name", n.name, "--monitor", f.MonitorURL(), "--run"}, f.env)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			err = waitReady(ctx, n.keeper, func(ctx context.Context) error {
				states, err := f.States(ctx)
				if err == nil && len(states) == 0 {
					err = errors.New("not registered yet")
				}
				return err
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if err := f.waitSettled(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// requireAutoFailover finds pg_autoctl and checks that the pgautofailover
// extension is installed for the PostgreSQL of binDir. Either missing is an
// error naming both packages.
func requireAutoFailover(binDir string) (string, error) {
	out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--sharedir", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("topology: pg_config: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return "", fmt.Errorf("topology: pg_config printed %q", out)
	}
	major := "15"
	if fields := strings.Fields(lines[1]); len(fields) >= 2 {
		major, _, _ = strings.Cut(fields[1], ".")
	}
	pkgs := []string{"postgresql-" + major + "-auto-failover", "pg-auto-failover-cli"}
	autoctl, err := program("pg_autoctl", pkgs...)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(lines[0], "extension", "pgautofailover.control")); err != nil {
		return "", missing("the pgautofailover extension for PostgreSQL "+major, pkgs...)
	}
	return autoctl, nil
}

func (f *Formation) initdb(ctx context.Context, binDir, pgdata string) error {
	cmd := f.dir.command(filepath.Join(binDir, "initdb"), []string{"--pgdata", pgdata, "--auth=trust",
		"--username=postgres", "--encoding=UTF8", "--locale=C", "--no-sync"}, f.env)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("topology: initdb %s: %w\n%s", pgdata, err, out)
	}
	conf := fmt.Sprintf("\n# topology\nunix_socket_directories = '%s'\nfsync = off\nfull_page_writes = off\n", f.dir.path)
	if err := appendLine(filepath.Join(pgdata, "postgresql.conf"), conf); err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	return ctx.Err()
}

// MonitorURL returns the monitor's connection string, as pg_autoctl's nodes
// use it.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monPort)
}

// URL returns a multi-host connection string for database on the
// formation, as user postgres, that connects to whichever node is the
// primary (target_session_attrs=read-write).
func (f *Formation) URL(database string) string {
	hosts := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?target_session_attrs=read-write&sslmode=disable", strings.Join(hosts, ","), database)
}

// States returns the nodes as the monitor sees them, in node order.
func (f *Formation) States(ctx context.Context) ([]NodeState, error) {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monPort))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT nodename, nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (NodeState, error) {
		var s NodeState
		err := row.Scan(&s.Name, &s.Port, &s.Reported, &s.Goal)
		return s, err
	})
}

// Primary returns the port of the node that is the settled primary.
func (f *Formation) Primary(ctx context.Context) (int, error) {
	states, err := f.States(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range states {
		if s.Reported == "primary" && s.Goal == "primary" {
			return s.Port, nil
		}
	}
	return 0, fmt.Errorf("topology: no settled primary: %v", states)
}

// settled reports whether one node is primary and the other secondary,
// both as reported and as assigned: synchronous replication is on.
func settled(states []NodeState) bool {
	var primary, secondary int
	for _, s := range states {
		switch {
		case s.Reported == "primary" && s.Goal == "primary":
			primary++
		case s.Reported == "secondary" && s.Goal == "secondary":
			secondary++
		}
	}
	return primary == 1 && secondary == len(states)-1
}

func (f *Formation) waitSettled(ctx context.Context) error {
	var last []NodeState
	for {
		states, err := f.States(ctx)
		if err == nil && len(states) == len(f.nodes) && settled(states) {
			return nil
		}
		if err == nil {
			last = states
		}
		for _, d := range append([]*daemon{f.monitor}, f.keepers()...) {
			if d != nil && d.exited() {
				return fmt.Errorf("topology: %s exited (%v):\n%s", d.name, d.err, d.logTail())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topology: formation not settled: %w (states %v, last error %v)\n%s", ctx.Err(), last, err, f.logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *Formation) keepers() []*daemon {
	var ds []*daemon
	for _, n := range f.nodes {
		if n.keeper != nil {
			ds = append(ds, n.keeper)
		}
	}
	return ds
}

func (f *Formation) logs() string {
	var b strings.Builder
	for _, d := range append([]*daemon{f.monitor}, f.keepers()...) {
		if d != nil {
			fmt.Fprintf(&b, "--- %s\n%s\n", d.name, d.logTail())
		}
	}
	return b.String()
}

// Failover promotes the standby with pg_autoctl perform failover and
// returns the port of the new primary once it is promoted (it accepts
// writes), or when ctx is done (2 minutes if it has no deadline). The old
// primary then rejoins as the synchronous standby: call WaitSettled before
// another failover.
func (f *Formation) Failover(ctx context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := withDefault(ctx, formationTimeout)
	defer cancel()
	before, err := f.Primary(ctx)
	if err != nil {
		return 0, err
	}
	// The monitor's perform_failover can lose a deadlock against a
	// keeper's concurrent state report; it changes nothing then, and is
	// tried again.
	for attempt := 1; ; attempt++ {
		cmd := f.dir.command(f.autoctl, []string{"perform", "failover", "--monitor", f.MonitorURL()}, f.env)
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(string(out), "deadlock detected") {
			return 0, fmt.Errorf("topology: pg_autoctl perform failover: %w\n%s\n%s", err, out, f.logs())
		}
	}
	for {
		states, err := f.States(ctx)
		if err == nil {
			for _, s := range states {
				// wait_primary accepts writes, without a synchronous
				// standby until the old primary has caught up.
				if s.Port != before && (s.Reported == "primary" || s.Reported == "wait_primary") {
					return s.Port, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("topology: no new primary after failover: %w (states %v, last error %v)\n%s", ctx.Err(), states, err, f.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitSettled waits until one node is the primary and the other its
// synchronous standby, as reported by their keepers and as assigned by the
// monitor, or until ctx is done (2 minutes if it has no deadline).
func (f *Formation) WaitSettled(ctx context.Context) error {
	ctx, cancel := withDefault(ctx, formationTimeout)
	defer cancel()
	return f.waitSettled(ctx)
}

// Logs returns the end of the monitor's and the keepers' logs.
func (f *Formation) Logs() string { return f.logs() }

// Destroy stops the nodes and the monitor and removes the formation's
// directory. Calling it again does nothing.
func (f *Formation) Destroy() error {
	if f.dir == nil {
		return nil
	}
	var wg sync.WaitGroup
	for _, d := range f.keepers() {
		wg.Go(func() { _ = d.stop() })
	}
	wg.Wait()
	if f.monitor != nil {
		_ = f.monitor.stop()
	}
	err := f.dir.remove()
	f.dir = nil
	return err
}
