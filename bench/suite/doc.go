// Package suite is almanac's benchmark suite, run by the almanac-bench
// command of this module: every figure of the engine next to a baseline
// measured in the same run, on the same database, with a ratio and the bar
// it must meet.
//
// These machines are shared and noisy, so a figure alone means little. Each
// scenario measures the engine and its baselines in turn (who goes first
// rotates every repeat), each measurement on a freshly loaded and vacuumed
// table, and quotes medians: the median of each side, and the median of the
// per-repeat ratios, which cancels most of the drift between repeats.
//
// Every throughput measurement counts handler runs, per slot or job, and
// fails with ErrNotExactlyOnce if any ran twice or not at all — almanac,
// the raw loops, River and pgbench alike. Every side works on a warm pool
// (its connections opened before timing) and is timed from the moment its
// workers start to the last durable completion.
//
// Baselines:
//
//   - locked mode, batched locked mode and lease mode against the very
//     statements the engine sends, captured by a pgx tracer while it works
//     one slot and replayed by a bare loop of the same concurrency: the
//     ratio is the engine's own overhead;
//   - batched locked mode and lease mode against River, linked in as a
//     library and run in the same process on the same database;
//   - each throughput row also against pgbench doing the same claim and
//     completion on a bare table (the ceiling of that shape of work);
//   - gap detection against the lead() window query a DBA would write, and
//     the naive generate_series … NOT EXISTS anti-join as a second row;
//     materialization against one INSERT … SELECT generate_series into the
//     same indexed table;
//   - wake-up latency against a bare NOTIFY reaching a LISTEN connection;
//   - peak memory of a 1M-slot run against the same command over 1,000
//     slots;
//   - idle series (series-scale): thousands of tenants, each with a series
//     and a job, in one process against River with a periodic job per
//     tenant, each side in a process of its own (the bench binary started
//     again, see RunChild) on a cluster the scenario starts for itself, so
//     that the transactions, CPU and memory measured are that side's alone.
//
// RunSustained is the long scenario: a cluster started for it with
// PostgreSQL's default autovacuum, batched workers and a feeder re-opening
// completed slots, reported per period (throughput, table size, HOT
// updates, dead tuples) and checked exactly-once at the end.
//
// Every scenario works in schemas of its own, named almanac_bench_*, and
// drops them when it is done; it never touches almanac's own schema.
// BENCHMARKS.md at the repository root has the results and what limits
// each figure.
package suite
