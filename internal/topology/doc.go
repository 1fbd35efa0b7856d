// Package topology starts the deployments almanac must work in, for tests:
// PgBouncer in front of a server, a pg_auto_failover formation (a monitor, a
// primary and a synchronous standby), and a TCP proxy that can be frozen to
// cut a worker off from its database. It is test tooling, not engine code;
// its tests (in this package) drive the CLI sidecar and the Client through
// these topologies and check that no slot is missed or run twice.
//
// Components come from the Debian packages (pgbouncer,
// postgresql-15-auto-failover, pg-auto-failover-cli). A missing one is an
// error naming the apt-get line that installs it (ErrMissing); tests fail
// with it rather than skip.
//
// Everything listens on 127.0.0.1, on ports chosen free, and lives in one
// directory per component under os.TempDir(). When the caller is root the
// servers run as user postgres (PostgreSQL and pg_autoctl refuse root), like
// pgcluster's throwaway clusters. Each server runs in its own process group,
// recorded in its directory with the pid of the process that started it:
// Stop and Destroy end the group, and starting any component first ends the
// groups of processes that died without cleaning up (a panic, a -timeout).
// Servers also get SIGKILL when the process that started them dies.
package topology
