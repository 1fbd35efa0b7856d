-- Lowers the frontier of parts of $3 slots to part $4, when it is further.
UPDATE {{.schema}}.slot_frontier SET next_part = $4
WHERE name = $1 AND "interval" = $2 AND part_slots = $3 AND next_part > $4::bigint
