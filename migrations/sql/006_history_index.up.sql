-- almanac schema, version 6: a slot's history is found through a block-range
-- index on its start, not a B-tree.
--
-- The B-tree on slot_event (slot_start) took each entry at the place of the
-- event's slot, and events arrive in the order things happen, not in slot
-- order: a series whose late data keeps re-opening windows puts each new
-- entry beside that slot's older ones, all over the index. Once the index
-- outgrew shared buffers, inserts read and dirtied pages all over it, and
-- after each checkpoint wrote each of them whole into the WAL. Measured with
-- pgbench over 10M events, inserting re-opens of 1,000 slots: 565 bytes of
-- WAL per event with the B-tree against 153 without any index, and 297
-- statements a second against 499. Under sustained re-opens, throughput
-- sank as the history grew.
--
-- A block-range index keeps, for each run of 16 heap pages, the starts its
-- events span (minmax-multi: up to 32 values or ends of intervals, so a few
-- stray events do not widen a run to everything). Inserts into the run being
-- filled, not yet summarized, write nothing to it. Events written together
-- (a re-open, a batch's outcomes) have nearby starts, so a slot's events are
-- found by reading the few runs whose ranges hold its start and the runs not
-- summarized yet: about 12 ms for one slot over 10M events (1.3 GB) here,
-- against 0.3 ms with the B-tree. Reading one slot's history is an
-- operator's question; writing it is on the path of outcomes and re-opens.
--
-- VACUUM summarizes the runs written since the last one. Autovacuum
-- vacuums an insert-only table once a fifth of it is new, which would leave
-- a fifth of the history for every lookup to read; here it does so every
-- 100,000 events (about 14 MB) instead, so the unsummarized tail stays that
-- short where autovacuum runs. Such a vacuum reads only the pages written
-- since the last one. (The index's autosummarize option would ask for each
-- run as it fills, but autovacuum queues at most 256 such requests and logs
-- every one it drops: under sustained re-opens, hundreds of lines a minute.)
--
-- Needs PostgreSQL 14 or later (minmax-multi). Building it holds a SHARE
-- lock on slot_event (history writes wait) for one pass over the table,
-- about 3 s per GB here.
DROP INDEX {{schema}}.slot_event_slot_idx;
CREATE INDEX slot_event_slot_idx ON {{schema}}.slot_event
    USING brin (slot_start timestamptz_minmax_multi_ops) WITH (pages_per_range = 16);
ALTER TABLE {{schema}}.slot_event SET (autovacuum_vacuum_insert_threshold = 100000, autovacuum_vacuum_insert_scale_factor = 0);
