//go:build linux

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
//
// The tests are the deployment suite. Sidecars are the built CLI (`almanac
// run … -- sh -c …`) whose command appends a start and an end line per run
// to a file, with the slot, the fencing token and the time on the
// machine's monotonic clock, so "ran twice" is two runs of one slot and
// "overlap" two runs whose intervals intersect:
//
//   - TestPgBouncer: in session and transaction pooling (the latter with
//     the plain URL and with pgx's simple protocol), migrate, materialize,
//     locked, batched and lease-mode jobs of the Client with an effect row
//     per slot, the sidecar, and a re-open reaching an idle sidecar
//     (LISTEN through session pooling or a direct --listen-url; through
//     transaction pooling a warning that wake-ups fall back to polling).
//   - TestFailover: two sidecars and a locked-mode Client on a formation's
//     multi-host URL, 360 slots, two failovers (180 and one without
//     ALMANAC_LONG_TESTS): none missed or run twice, work resumed within
//     5 s of each promotion.
//   - TestImmediateRestart: two sidecars, 300 slots (150 without
//     ALMANAC_LONG_TESTS), two pg_ctl restart -m immediate: none missed or
//     run twice.
//   - TestPartitionedSidecarStopsBeforeItsLeaseExpires: a sidecar's proxy
//     frozen for longer than its lease while its command runs; the
//     successor's run must not overlap it.
//   - TestConnectionsPerProcess: the connections a sidecar and a Client
//     open, per worker.
//
// Run them with go test -race -v ./internal/topology (about 100 s: the
// formation takes 10 to 40 s to set up, and the tests run in parallel).
package topology
