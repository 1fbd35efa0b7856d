// Package coverage makes a missing interval impossible to overlook: it finds
// the gaps of a series (the slots of a range that have no row), materializes
// missing slots, re-opens finished ones for a backfill, clears retry backoff,
// marks slots SKIP, and summarizes a range by state.
//
// Every boundary comes from the series' grid (package slot); PostgreSQL only
// compares stored instants. Every statement is scoped to one series.
//
// # Finding gaps
//
// The primary key indexes the starts of a series, and the grid says how many
// slots a range must hold, so a range whose index-only count(*) equals the
// expected count is complete without reading a row. Gaps splits a range into
// up to 1024 parts, counts all of them in one statement, drops the complete
// parts, and splits the incomplete ones again until they are small enough to
// list; a range with a few dozen holes costs about one index-only pass over
// it, a complete range exactly one (measured over a million slots: 0.12 s
// and 0.11 s, against 1.7 s for an anti-join of generate_series). Index-only
// scans read the heap for pages the visibility map does not mark
// all-visible, so gaps are found fastest on a vacuumed table: the same
// search took 0.21 s right after the rows were inserted. Autovacuum sets the
// map after large inserts; run VACUUM on the slot table after a big backfill
// to have it at once. Results are exact in any table state; only the speed
// varies.
//
// Two kinds of ranges spare even that pass (migration 003). A stored range
// says every grid slot in it has a row: Materialize records the range it
// filled, and a trigger cuts stored ranges around every row deleted, by
// almanac or plain SQL. A compacted range (Compact) stands for finished
// slots whose rows were deleted to bound the table. Gap searches skip both
// unread, so over ranges Materialize wrote they cost O(gaps)
// (docs/design/stored-and-compacted-ranges.md; BENCHMARKS.md measures 10
// million slots). Slots inserted by other
// tools are found by counting, as above.
//
// # Status
//
// Status counts open slots (AVAILABLE, ACQUIRED) and SKIP ones from their
// partial indexes and missing ones by the gap search, and derives COMPLETE
// as the rest of the grid's slots: it never reads a finished row, and
// costs O(gaps + open + skipped slots), not O(slots).
//
// # Bounded history
//
// Compact deletes old finished rows into compacted ranges, about one per
// series however many years; gap searches, Status and Materialize treat
// their slots as existing and finished (no worker can claim one again), and
// Reopen brings them back as a new generation.
//
// # Writing
//
// Writes are split into transactions of at most Options.ChunkSize slots.
// Slots held by a worker — ACQUIRED under a lease, or locked by a worker in
// locked mode (an open transaction holding FOR NO KEY UPDATE on the row) —
// are never waited for and never changed: they are left alone and listed in
// the result as Held. Operations that make slots acquirable notify idle
// workers once per call (package wake), in the transaction of their last
// chunk.
//
// # History
//
// Reopen, Retry and Skip record one event per slot they change in the
// slots' history (the slot_event table), written by the slot table's
// trigger from each row's change, with the reason and Options.Actor; a re-open's event also carries the
// completion it ends, which workers record on the slot's row rather than as
// an event of its own. Workers record their other outcomes in the history
// too. History reads a slot's story (the slot_history view: events and
// completions together); PruneHistory keeps the table within
// the schema's retention. Materialize records nothing: a slot's created_at
// says when it was created. Plain SQL that makes slots acquirable is
// recorded, and wakes workers, by a trigger on the slot table.
package coverage
