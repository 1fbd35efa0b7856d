-- finish_locked for a batch of one slot (Run), with the same parameters as
-- scalars: $3 the slot's start, $4 status, $5 fence, $6 attempts, $7 fail
-- count, $8 message, $9 delay (microseconds), $10 checkpoint, $11 the
-- queue's owner. Planning is most of the cost of a one-row statement, and
-- this one plans about as fast as the bare UPDATE without history did
-- (measured: 0.22 ms against 0.34 ms for the batch form on one row).
WITH d AS (
UPDATE {{.schema}}.slot AS s SET
    status = $4, fence = $5, attempts = $6, fail_count = $7, message = $8, owner = NULL, lease_until = NULL,
    not_before = {{notBefore "$9::bigint"}},
    data = coalesce($10::jsonb, s.data),
    completed_at = CASE WHEN $4 = 'COMPLETE' THEN clock_timestamp() ELSE s.completed_at END,
    completed_by = CASE WHEN $4 = 'COMPLETE' THEN $11::uuid END,
    {{template "stale" (set . "status" "$4" "fence" "$5" "since" "now()")}},
    updated_at = clock_timestamp()
WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = $3
RETURNING 1
)
SELECT {{template "runOwner" "$11"}}
