// Package pgcluster starts and controls a throwaway PostgreSQL cluster: a
// private data directory and server process on a free local port. It is
// the database of `almanac demo`, which the almanac binary links, and the
// test harness (internal/testkit) starts one too when no server is given,
// and for chaos experiments.
//
// A cluster lives in one directory (Options.Dir) laid out as:
//
//	Dir/data             the data directory (PGDATA)
//	Dir/postgres.log     the server log
//	Dir/.s.PGSQL.<port>  the server's Unix socket
//
// The server listens on 127.0.0.1 only. Clients should use URL, which
// connects over TCP so that keepalive and network settings behave as they do
// in production.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned (wrapped) by Find and Start when no directory
// holding both initdb and pg_ctl can be found.
var ErrNoBinaries = errors.New("pgcluster: PostgreSQL binaries (initdb, pg_ctl) not found")

// FastSettings trade durability for speed: a throwaway cluster has nothing
// worth keeping across a machine crash. Nothing is applied by default; pass
// it (or a copy with additions) as Options.Settings. Do not mutate it.
var FastSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
}

// DefaultWait bounds how long Start, Cluster.Start and Cluster.Restart wait
// for the server to accept connections when ctx has no deadline.
const DefaultWait = 30 * time.Second

const (
	superuser    = "postgres"
	portAttempts = 5
)

// debianRoot and sourceBin are variables so tests can point Find elsewhere.
var (
	debianRoot = "/usr/lib/postgresql"
	sourceBin  = "/usr/local/pgsql/bin"
)

// Find returns the directory holding initdb and pg_ctl. It looks in PATH
// first, then in the newest /usr/lib/postgresql/<version>/bin (Debian and
// Ubuntu packages, which keep them off PATH), then in /usr/local/pgsql/bin
// (a source install). If none has both it returns an error wrapping
// ErrNoBinaries that lists where it looked.
func Find() (string, error) {
	return find(os.Getenv("PATH"), debianRoot, sourceBin)
}

func find(path, debian, source string) (string, error) {
	var candidates []string
	for _, dir := range filepath.SplitList(path) {
		if dir != "" {
			candidates = append(candidates, dir)
		}
	}
	candidates = append(candidates, debianBinDirs(debian)...)
	candidates = append(candidates, source)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (looked in PATH, %s/<version>/bin and %s)", ErrNoBinaries, debian, source)
}

// debianBinDirs lists root/<version>/bin newest first, comparing versions
// numerically so that 10 sorts above 9.6.
func debianBinDirs(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	type version struct {
		parts []int
		dir   string
	}
	var versions []version
	for _, e := range entries {
		var parts []int
		for _, p := range strings.Split(e.Name(), ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				parts = nil
				break
			}
			parts = append(parts, n)
		}
		if parts != nil {
			versions = append(versions, version{parts, filepath.Join(root, e.Name(), "bin")})
		}
	}
	slices.SortFunc(versions, func(a, b version) int { return slices.Compare(b.parts, a.parts) })
	dirs := make([]string, len(versions))
	for i, v := range versions {
		dirs[i] = v.dir
	}
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Options configures Start. The zero value is usable.
type Options struct {
	// BinDir holds initdb, pg_ctl and postgres. Default: Find().
	BinDir string
	// Dir is the parent of the data directory, log and socket. Default: a
	// fresh directory from os.MkdirTemp, removed by Destroy. A Dir given
	// here is kept by Destroy. When running as root the tree is chowned to
	// the server's user, which must be able to traverse Dir's parents (a
	// directory from t.TempDir is not traversable; one under /tmp is).
	// Unix socket paths are limited to about 100 bytes, so keep Dir short.
	Dir string
	// Port is the TCP port on 127.0.0.1. Default: a free port, chosen again
	// (a few times) if another process takes it before the server binds it.
	Port int
	// Settings are extra postgresql.conf settings, name to value, e.g.
	// FastSettings. They persist across Stop and Start. listen_addresses,
	// port and unix_socket_directories are pgcluster's and are rejected.
	Settings map[string]string
	// Log receives the server log, copied from Dir/postgres.log by a
	// background goroutine until Destroy returns. Default: the log is only
	// kept in that file.
	Log io.Writer
}

// Cluster is a running (or stopped) PostgreSQL cluster created by Start. Its
// methods are safe for concurrent use.
type Cluster struct {
	binDir, dir, dataDir, logPath string
	ownDir                        bool
	cred                          *credential

	mu        sync.Mutex
	port      int
	running   bool
	destroyed bool

	stopTail chan struct{}
	tailDone chan struct{}
}

// Start creates a cluster with initdb (trust authentication, superuser
// postgres, UTF8, locale C, no fsync during initdb) and starts it, returning
// once it accepts a connection. It waits until ctx is done, or DefaultWait if
// ctx has no deadline. When running as root it runs the server as user
// postgres, or nobody if there is no postgres user, because PostgreSQL
// refuses to run as root.
//
// On failure nothing is left running and a directory Start created is
// removed; the error says which step failed and includes the end of the
// server log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := checkSettings(opts.Settings); err != nil {
		return nil, err
	}
	c := &Cluster{binDir: opts.BinDir, dir: opts.Dir, port: opts.Port}
	if c.binDir == "" {
		if c.binDir, err = Find(); err != nil {
			return nil, err
		}
	}
	if os.Geteuid() == 0 {
		if c.cred, err = ServerUser(); err != nil {
			return nil, err
		}
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "almanac-pg-"); err != nil {
			return nil, fmt.Errorf("pgcluster: create directory: %w", err)
		}
		c.ownDir = true
	} else if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgcluster: create directory: %w", err)
	}
	if c.dir, err = filepath.Abs(c.dir); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c.dataDir = filepath.Join(c.dir, "data")
	c.logPath = filepath.Join(c.dir, "postgres.log")
	defer func() {
		if err != nil {
			_ = c.Destroy()
		}
	}()

	if c.cred != nil {
		if err := c.handOver(); err != nil {
			return nil, err
		}
	}
	out, err := c.command(ctx, "initdb", "--pgdata="+c.dataDir, "--auth=trust", "--username="+superuser,
		"--encoding=UTF8", "--locale=C", "--no-sync").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: initdb in %s: %w\n%s", c.dataDir, err, bytes.TrimSpace(out))
	}
	// Settings go in a file included from postgresql.conf rather than on
	// the command line, so that a later Start (after Stop or a crash)
	// brings the server back exactly as configured.
	if err := appendFile(filepath.Join(c.dataDir, "postgresql.conf"), "\ninclude = 'almanac.conf'\n"); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}

	if opts.Log != nil {
		c.stopTail, c.tailDone = make(chan struct{}), make(chan struct{})
		go c.tail(opts.Log)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	pickPort := c.port == 0
	for attempt := 1; ; attempt++ {
		if pickPort {
			if c.port, err = freePort(); err != nil {
				return nil, fmt.Errorf("pgcluster: find a free port: %w", err)
			}
		}
		if err := c.writeConf(opts.Settings); err != nil {
			return nil, err
		}
		logSize := int64(0)
		if fi, err := os.Stat(c.logPath); err == nil {
			logSize = fi.Size()
		}
		err = c.startLocked(ctx)
		if err == nil {
			return c, nil
		}
		// Another process can take the port between freePort and the
		// server binding it; only then is trying again worthwhile.
		if !pickPort || attempt == portAttempts || !strings.Contains(c.readLog(logSize), "already in use") {
			return nil, err
		}
	}
}

// ServerUser picks the account that servers started by root run as (user
// postgres, else nobody): PostgreSQL refuses to run as root, and the other
// test servers (poolers, failover keepers) are run the same way. It fails
// when neither account exists. On Unix systems, where alone it is used, a
// credential is a syscall.Credential.
func ServerUser() (*credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgcluster: running as root, and PostgreSQL refuses to run as root, but neither user postgres nor nobody exists to run it as")
}

// handOver gives the directory tree to the server's user and checks that the
// user can reach it, because the server (not us) opens files in it.
func (c *Cluster) handOver() error {
	err := filepath.WalkDir(c.dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("pgcluster: chown %s to uid %d: %w", c.dir, c.cred.Uid, err)
	}
	for dir := filepath.Dir(c.dir); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if !canTraverse(fi, c.cred) {
			return fmt.Errorf("pgcluster: the server runs as uid %d, which cannot traverse %s (mode %v); use a Dir under /tmp or chmod o+x %s",
				c.cred.Uid, dir, fi.Mode().Perm(), dir)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

func canTraverse(fi os.FileInfo, cred *credential) bool {
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case uid == cred.Uid:
		return perm&0o100 != 0
	case gid == cred.Gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func (c *Cluster) writeConf(settings map[string]string) error {
	var b strings.Builder
	b.WriteString("# written by pgcluster; rewritten on every Start\n")
	fmt.Fprintf(&b, "listen_addresses = '127.0.0.1'\nport = %d\n", c.port)
	fmt.Fprintf(&b, "unix_socket_directories = '%s'\n", quoteConf(c.dir))
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "%s = '%s'\n", name, quoteConf(settings[name]))
	}
	path := filepath.Join(c.dataDir, "almanac.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	return nil
}

// checkSettings rejects what could escape its line in the config file.
func checkSettings(settings map[string]string) error {
	for name, value := range settings {
		switch strings.ToLower(name) {
		case "listen_addresses", "port", "unix_socket_directories":
			return fmt.Errorf("pgcluster: setting %s is managed by pgcluster (use Options.Port)", name)
		}
		if !settingName.MatchString(name) || strings.ContainsAny(value, "\n\r") {
			return fmt.Errorf("pgcluster: invalid setting %q = %q", name, value)
		}
	}
	return nil
}

func quoteConf(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}

// freePort is a variable so that tests can simulate losing the race for a
// port.
var freePort = func() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command runs a PostgreSQL program as the server's user, with PG*
// variables removed so that the caller's environment cannot redirect it to
// another data directory, port or host.
func (c *Cluster) command(ctx context.Context, program string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, program), args...)
	cmd.Dir = c.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if c.cred != nil {
		runAs(cmd, c.cred)
	}
	return cmd
}

// URL returns a connection string for database on this cluster, as
// superuser postgres over TCP: postgres://postgres@127.0.0.1:<port>/<database>?sslmode=disable.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.Port(), database)
}

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// Dir returns the directory holding the data directory, log and socket.
func (c *Cluster) Dir() string { return c.dir }

// Stop stops the server with pg_ctl stop -m mode: "smart" waits for clients
// to disconnect (so it blocks while any pool is open), "fast" disconnects
// them, "immediate" aborts without a shutdown checkpoint, like a crash. It
// waits until the server has exited or ctx is done (DefaultWait if ctx has no
// deadline). Stopping a stopped (or killed) server does nothing.
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("pgcluster: unknown stop mode %q (want smart, fast or immediate)", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return errors.New("pgcluster: cluster destroyed")
	}
	if !c.running {
		return nil
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", mode, "-w", "-t", waitSeconds(ctx)).CombinedOutput()
	if err != nil && c.alive() {
		return fmt.Errorf("pgcluster: pg_ctl stop -m %s: %w\n%s\n%s", mode, err, bytes.TrimSpace(out), c.logTail())
	}
	c.running = false
	return nil
}

// Start starts a stopped cluster again with the same data, port and
// settings, and waits until it accepts a connection or ctx is done
// (DefaultWait if ctx has no deadline). Starting a running server does
// nothing; one that died behind our back is started again. On failure the
// error includes the end of the server log.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return errors.New("pgcluster: cluster destroyed")
	}
	if c.running && c.alive() {
		return nil
	}
	return c.startLocked(ctx)
}

// Restart stops the server with mode (see Stop), starts it again and waits
// until it accepts a connection. After "immediate" the server first runs
// crash recovery.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if err := c.Stop(ctx, mode); err != nil {
		return err
	}
	return c.Start(ctx)
}

func (c *Cluster) startLocked(ctx context.Context) error {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	// -l makes the server write to the log file instead of inheriting our
	// stdout/stderr, so it outlives pg_ctl without holding our pipes open.
	out, err := c.command(ctx, "pg_ctl", "start", "-D", c.dataDir, "-l", c.logPath, "-w", "-t", waitSeconds(ctx)).CombinedOutput()
	if err != nil {
		// pg_ctl may give up (or be killed by ctx) while the server is
		// still coming up; make sure nothing is left behind.
		c.forceStop()
		return fmt.Errorf("pgcluster: pg_ctl start on port %d: %w\n%s\nserver log %s:\n%s",
			c.port, err, bytes.TrimSpace(out), c.logPath, c.logTail())
	}
	c.running = true
	if err := waitReady(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, c.port)); err != nil {
		return fmt.Errorf("pgcluster: server started on port %d but does not accept connections: %w\nserver log %s:\n%s",
			c.port, err, c.logPath, c.logTail())
	}
	return nil
}

// waitReady proves the server usable with a real connection: pg_ctl -w only
// reports that the postmaster is ready, not that a TCP client gets through.
func waitReady(ctx context.Context, url string) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attempt, url)
		if err == nil {
			err = conn.Ping(attempt)
			_ = conn.Close(attempt)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// alive asks pg_ctl rather than trusting c.running, because a chaos test may
// have killed the server behind our back.
func (c *Cluster) alive() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.command(ctx, "pg_ctl", "status", "-D", c.dataDir).Run() == nil
}

func (c *Cluster) forceStop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "immediate", "-w").Run()
	c.running = false
}

// Destroy stops the server (immediate mode) if it is running and removes Dir
// if Start created it. It tries every step even if one fails, and returns
// the errors of those that failed. Calling it again does nothing.
func (c *Cluster) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil
	}
	c.destroyed = true
	var errs []error
	if c.running {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
		out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "immediate", "-w").CombinedOutput()
		cancel()
		if err != nil && c.alive() {
			errs = append(errs, fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, bytes.TrimSpace(out)))
		}
		c.running = false
	}
	if c.stopTail != nil {
		close(c.stopTail)
		<-c.tailDone
	}
	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("pgcluster: %w", err))
		}
	}
	return errors.Join(errs...)
}

// tail copies the log file to w as it grows; the file stays the primary log
// so that pg_ctl can own the server's output.
func (c *Cluster) tail(w io.Writer) {
	defer close(c.tailDone)
	var offset int64
	buf := make([]byte, 32<<10)
	drain := func() {
		f, err := os.Open(c.logPath)
		if err != nil {
			return
		}
		defer f.Close()
		for {
			n, err := f.ReadAt(buf, offset)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				offset += int64(n)
			}
			if err != nil || n == 0 {
				return
			}
		}
	}
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-c.stopTail:
			drain()
			return
		case <-ticker.C:
			drain()
		}
	}
}

// logTail returns the last lines of the server log, which is where the
// server explains why it did not start.
func (c *Cluster) logTail() string {
	const maxTail = 4 << 10
	fi, err := os.Stat(c.logPath)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	start := max(fi.Size()-maxTail, 0)
	b := c.readLog(start)
	if start > 0 {
		if _, rest, ok := strings.Cut(b, "\n"); ok {
			b = rest
		}
	}
	return strings.TrimSpace(b)
}

// readLog returns the server log from byte offset on.
func (c *Cluster) readLog(offset int64) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultWait)
}

// waitSeconds converts ctx's deadline into pg_ctl's -t, so pg_ctl reports
// its own timeout (with a useful message) before ctx kills it.
func waitSeconds(ctx context.Context) string {
	d, _ := ctx.Deadline()
	return strconv.Itoa(max(int(time.Until(d).Seconds()), 1))
}
