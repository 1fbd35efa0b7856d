//go:build linux

package topology

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Pooling modes of PgBouncer.
const (
	// Transaction pooling hands the server connection to another client
	// after every transaction: no session state survives a COMMIT.
	Transaction = "transaction"
	// Session pooling keeps a server connection for the whole client
	// session: it behaves like a direct connection.
	Session = "session"
)

// PgBouncerOptions configure StartPgBouncer.
type PgBouncerOptions struct {
	// Server is the connection string of the server to pool; PgBouncer
	// connects to its host and port as its user (with its password, if
	// any), for any database name. Required.
	Server string
	// Mode is Transaction or Session. Default Transaction.
	Mode string
	// PoolSize is default_pool_size: server connections per user and
	// database. Default 20.
	PoolSize int
	// Settings are extra [pgbouncer] settings, name to value.
	Settings map[string]string
}

// PgBouncer is a running PgBouncer (the Debian package's binary) listening
// on 127.0.0.1 with trust authentication for the server's user.
type PgBouncer struct {
	dir  *workDir
	d    *daemon
	port int
	user string
}

// StartPgBouncer starts PgBouncer in front of opts.Server and returns once
// a client gets a server connection through it, or when ctx is done (30 s
// if ctx has no deadline). It fails with an error wrapping ErrMissing when
// pgbouncer is not installed.
func StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (_ *PgBouncer, err error) {
	bin, err := program("pgbouncer", "pgbouncer")
	if err != nil {
		return nil, err
	}
	if opts.Mode == "" {
		opts.Mode = Transaction
	}
	if opts.Mode != Transaction && opts.Mode != Session {
		return nil, fmt.Errorf("topology: pgbouncer mode %q: expected %s or %s", opts.Mode, Transaction, Session)
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 20
	}
	server, err := pgconn.ParseConfig(opts.Server)
	if err != nil {
		return nil, fmt.Errorf("topology: pgbouncer server: %w", err)
	}
	ctx, cancel := withDefault(ctx, 30*time.Second)
	defer cancel()
	dir, err := newWorkDir("pgbouncer")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{dir: dir, user: server.User}
	defer func() {
		if err != nil {
			_ = b.Stop()
		}
	}()
	users, err := dir.writeFile("userlist.txt", fmt.Sprintf("%s %s\n", quoteUserlist(server.User), quoteUserlist(server.Password)))
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		if b.port, err = freePort(); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
		ini, err := dir.writeFile("pgbouncer.ini", b.ini(users, server, opts))
		if err != nil {
			return nil, err
		}
		// In the foreground, under our supervision: -d would detach it
		// from the process group we end it with.
		b.d, err = dir.start("pgbouncer", bin, []string{ini}, []string{"PATH=/usr/bin:/bin", "LANG=C"})
		if err != nil {
			return nil, err
		}
		err = waitReady(ctx, b.d, func(ctx context.Context) error { return ping(ctx, b.URL(server.Database)) })
		if err == nil {
			return b, nil
		}
		if attempt == 3 || !strings.Contains(b.d.logTail(), "Address already in use") {
			return nil, err
		}
		_ = b.d.stop()
	}
}

func (b *PgBouncer) ini(users string, server *pgconn.Config, opts PgBouncerOptions) string {
	settings := map[string]string{
		"listen_addr":     "127.0.0.1",
		"listen_port":     strconv.Itoa(b.port),
		"unix_socket_dir": "",
		"auth_type":       "trust",
		"auth_file":       users,
		"admin_users":     server.User,
		"pool_mode":       opts.Mode,
		"max_client_conn": "1000",
		// pgx asks for nothing PgBouncer would refuse, but other clients
		// (psql, libpq-based tools) send extra_float_digits.
		"ignore_startup_parameters": "extra_float_digits",
		"default_pool_size":         strconv.Itoa(opts.PoolSize),
		"pidfile":                   "pgbouncer.pid",
	}
	maps.Copy(settings, opts.Settings)
	var s strings.Builder
	fmt.Fprintf(&s, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", server.Host, server.Port)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&s, "%s = %s\n", k, settings[k])
	}
	return s.String()
}

// quoteUserlist quotes a user name or password for PgBouncer's auth_file.
func quoteUserlist(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// URL returns a connection string for database through PgBouncer, as the
// server's user, with nothing added: what an application would be given.
func (b *PgBouncer) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(b.user), Host: fmt.Sprintf("127.0.0.1:%d", b.port), Path: "/" + database,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// Log returns the end of PgBouncer's log.
func (b *PgBouncer) Log() string { return b.d.logTail() }

// Stop stops PgBouncer and removes its directory. Calling it again does
// nothing.
func (b *PgBouncer) Stop() error {
	if b.dir == nil {
		return nil
	}
	if b.d != nil {
		_ = b.d.stop()
	}
	err := b.dir.remove()
	b.dir = nil
	return err
}
