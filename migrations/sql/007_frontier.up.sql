-- almanac schema, version 7: where the searches of every process on a series
-- go on from.
--
-- A worker searches for AVAILABLE slots after the part of the range its
-- process's searches have taken (acquire's floor), so the workers of one
-- process split a backlog among themselves. Processes did not know of each
-- other's parts: each one's next search read through the slots the others
-- had completed since its last, and stepped over the rows they held (8
-- workers as 4 processes of 2 drained a backlog at 0.84-0.90 of the
-- throughput of 8 in one process, reading 6.4 index entries per slot
-- against 2.3).
--
-- Here a process draws blocks of parts of the range (part_slots grid slots
-- each, the size of its searches) from a counter per series and part size:
-- next_part is the index of the first part (slot index / part_slots) no
-- process has drawn. It is a hint: a search still takes the first
-- acquirable slots from where it starts, and a lost or stale counter costs
-- order and speed, never a slot. Draws run in transactions of their own,
-- one per block of many searches.
CREATE TABLE {{schema}}.slot_frontier (
    name       text    NOT NULL,
    "interval" text    NOT NULL,
    part_slots integer NOT NULL CHECK (part_slots > 0),
    next_part  bigint  NOT NULL,
    PRIMARY KEY (name, "interval", part_slots),
    FOREIGN KEY (name, "interval") REFERENCES {{schema}}.series (name, "interval") ON DELETE CASCADE
);
