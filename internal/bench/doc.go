// Package bench is almanac's benchmark suite, shared by `almanac bench` and
// its tests: every figure of the engine next to a baseline measured in the
// same run, on the same database, with a ratio and the bar DESIGN.md sets
// for it.
//
// These machines are shared and noisy, so a figure alone means little. Each
// scenario measures the engine and its baseline alternately (the order
// swapped every repeat), each measurement on a freshly loaded and vacuumed
// table, and quotes medians: the median of each side, and the median of the
// per-repeat ratios, which cancels most of the drift between repeats.
//
// Baselines:
//
//   - locked mode, batched locked mode and lease mode against the very
//     statements the engine sends, captured by a pgx tracer while it works
//     one slot and replayed by a bare loop of the same concurrency: the
//     ratio is the engine's own overhead;
//   - batched locked mode and lease mode against River, built from the
//     nested module bench/river and run as a subprocess on the same
//     database (rows are skipped, with the reason, when it cannot be built);
//   - gap detection against the naive generate_series … NOT EXISTS
//     anti-join, and materialization against one INSERT … SELECT
//     generate_series into the same indexed table;
//   - wake-up latency against a bare NOTIFY reaching a LISTEN connection;
//   - peak memory of a 1M-slot run against the same command over 1,000
//     slots.
//
// Every scenario works in schemas of its own, named almanac_bench_*, and
// drops them when it is done; it never touches almanac's own schema.
// BENCHMARKS.md at the repository root has the results and what limits
// each figure.
package bench
