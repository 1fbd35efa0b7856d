-- Ejection takes the slot starting at $3, held or acquirable, now, whoever
-- holds it, with a lease of $5 microseconds for owner $4. NOWAIT: a slot
-- locked by a locked-mode transaction cannot be taken from it, and waiting
-- for that transaction would defeat the point. The run it ended, if the
-- slot was held, is recorded by the slot table's trigger (slot_record).
WITH target AS (
    SELECT slot_start, status = 'ACQUIRED' AS took_over
    FROM {{.schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND slot_start = $3 AND status IN ('AVAILABLE', 'ACQUIRED')
    FOR NO KEY UPDATE NOWAIT
),
claimed AS (
UPDATE {{.schema}}.slot AS s SET
    status = 'ACQUIRED', owner = $4, fence = nextval('{{.schema}}.fence_seq'),
    lease_until = clock_timestamp() + $5 * interval '1 microsecond',
    attempts = s.attempts + 1, not_before = NULL, updated_at = clock_timestamp()
FROM target AS t
WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = t.slot_start
RETURNING s.slot_start, s.slot_end, s.attempts, s.fail_count, s.data, s.message, t.took_over, s.fence, s.generation, s.lease_until,
    s.ctid
)
SELECT slot_start, slot_end, attempts, fail_count, data, message, took_over, fence, generation,
    {{template "upstream" set . "name" "$1" "interval" "$2" "slot" "claimed" "deps" "true"}}, lease_until, ctid FROM claimed
