-- A draw of a block of $5 parts of $3 slots from the series' frontier,
-- from part $4 on at the earliest (see frontier); it returns the block's
-- first part, or nothing when the block would start at part $6 or later,
-- past the end of the queue's range. One row per series and part size,
-- written in a transaction of its own: its lock is held for the statement
-- only.
INSERT INTO {{.schema}}.slot_frontier (name, "interval", part_slots, next_part)
SELECT $1, $2, $3, $4::bigint + $5::bigint WHERE $4::bigint < $6::bigint
ON CONFLICT (name, "interval", part_slots) DO UPDATE SET next_part = greatest(slot_frontier.next_part, $4::bigint) + $5::bigint
    WHERE greatest(slot_frontier.next_part, $4::bigint) < $6::bigint
RETURNING next_part - $5::bigint
