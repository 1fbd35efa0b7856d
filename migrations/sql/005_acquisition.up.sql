-- almanac schema, version 5: an acquisition index the primary key cannot
-- stand in for.
--
-- slot_available_idx had the primary key's columns in the primary key's
-- order, so the planner could serve "the first acquirable slots in slot
-- order" from either index and chose by their sizes and the statistics.
-- When the statistics said most of a series was AVAILABLE (a large
-- backfill) and the partial index had grown larger than the primary key
-- (it takes an entry every time a slot becomes AVAILABLE again), it read
-- the primary key with a status filter: every claim then read every slot
-- finished since the start of the range before it found an acquirable one.
--
-- Now the index keeps slot_start NULLS FIRST, and acquisition orders by
-- slot_start NULLS FIRST (NULLS LAST newest first). slot_start is never
-- NULL, so the order is the same, but the primary key (NULLS LAST) cannot
-- give it without sorting every open slot, and the planner keeps to this
-- index. Range conditions on slot_start use it as before.
--
-- Rebuilding it holds a SHARE lock on slot (writes wait) while it reads the
-- AVAILABLE rows, typically a moment.
DROP INDEX {{schema}}.slot_available_idx;
CREATE INDEX slot_available_idx ON {{schema}}.slot (name, "interval", slot_start NULLS FIRST)
    WHERE status = 'AVAILABLE';
