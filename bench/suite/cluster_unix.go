//go:build unix

package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cluster is a throwaway PostgreSQL cluster with the server's default
// settings (autovacuum on) but those given (ServerSetting), for the
// sustained and series-scale scenarios: initdb into a temporary directory,
// pg_ctl start on a free port of 127.0.0.1, and everything removed by
// stop. When the bench runs as root the server runs as user postgres (else
// nobody), because PostgreSQL refuses to run as root.
type cluster struct {
	bin, dir, data string
	port           int
	cred           *syscall.Credential
}

// findBin returns the directory holding initdb and pg_ctl: the one of
// initdb on PATH, else Debian's newest /usr/lib/postgresql/*/bin.
func findBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath(filepath.Join(filepath.Dir(p), "pg_ctl")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) > 0 {
		return filepath.Dir(dirs[len(dirs)-1]), nil
	}
	return "", errors.New("initdb and pg_ctl not found: apt-get install -y postgresql-15")
}

// startCluster creates and starts a cluster with settings added to its
// postgresql.conf; its URL is url().
func startCluster(ctx context.Context, settings []ServerSetting) (_ *cluster, err error) {
	c := &cluster{}
	if c.bin, err = findBin(); err != nil {
		return nil, err
	}
	if c.dir, err = os.MkdirTemp("/tmp", "almanac-bench-pg-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	c.data = filepath.Join(c.dir, "data")
	if os.Geteuid() == 0 {
		if c.cred, err = serverUser(); err != nil {
			return nil, err
		}
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown %s: %w", c.dir, err)
		}
	}
	if err := c.cmd(ctx, "initdb", "--pgdata="+c.data, "--auth=trust", "--username=postgres", "--encoding=UTF8", "--locale=C"); err != nil {
		return nil, err
	}
	if err := c.configure(settings); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s", c.port, c.dir)
	if err := c.cmd(ctx, "pg_ctl", "--pgdata="+c.data, "--log="+c.logFile(), "--wait", "--timeout=60", "-o", opts, "start"); err != nil {
		if refused := c.refusedSetting(); len(settings) > 0 && refused != "" {
			return nil, fmt.Errorf("%w: the server refused a --server-setting: %s", ErrInvalid, refused)
		}
		return nil, err
	}
	return c, nil
}

// refusedSetting returns the server log's complaint about a parameter, such
// as `invalid value for parameter "max_wal_size": "banana"`, or "". The
// server names the parameter on an earlier line than its last, which only
// says the configuration file contains errors.
func (c *cluster) refusedSetting() string {
	log, _ := os.ReadFile(c.logFile())
	for line := range strings.Lines(string(log)) {
		if !strings.Contains(line, `parameter "`) {
			continue
		}
		if _, msg, ok := strings.Cut(line, ":  "); ok { // after the prefix and the level
			line = msg
		}
		return strings.TrimSpace(line)
	}
	return ""
}

// configure appends settings to the cluster's postgresql.conf, where a
// later line wins over an earlier one of the same name.
func (c *cluster) configure(settings []ServerSetting) error {
	if len(settings) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n# --server-setting\n")
	for _, s := range settings {
		b.WriteString(s.confLine())
	}
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("server settings: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("server settings: %w", err)
	}
	return f.Close()
}

// logFile is the server's log.
func (c *cluster) logFile() string { return filepath.Join(c.dir, "postgres.log") }

// url reaches the cluster's postgres database as its superuser, over TCP.
func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// cmd runs one of the cluster's programs, as the server's user.
func (c *cluster) cmd(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(c.logFile())
		return fmt.Errorf("%s: %w: %s %s", name, err, lastLine(out.Bytes()), lastLine(log))
	}
	return nil
}

// stop stops the server, if it runs, and removes the directory.
func (c *cluster) stop() {
	if c.port != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = c.cmd(ctx, "pg_ctl", "--pgdata="+c.data, "--mode=fast", "--wait", "stop")
		cancel()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// serverUser is the account a server started by root runs as.
func serverUser() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root, and PostgreSQL refuses to run as root, but neither user postgres nor nobody exists to run it as")
}
