-- The one write of a locked-mode run: every outcome of the batch in one
-- statement, values computed by the worker from the locked rows except the
-- clock-based ones. Their history is written by the slot table's trigger
-- (slot_record, migration 11) from the rows' changes: one event per outcome
-- but completions, which the row records (completed_by), by the run of $11,
-- the queue's owner, which the statement names for the trigger (runOwner);
-- and one per expired lease the batch took over (its owner and fence).
--
-- Parameters, each an array of the batch's outcomes sorted by slot start:
--   $3 slot starts, $4 statuses, $5 fences, $6 attempts, $7 fail counts,
--   $8 messages, $9 delays before the slot is acquirable again
--   (microseconds; NULL none, negative parked), $10 checkpoints; and $11
--   the queue's owner.
--
-- Each row takes its values by its position in the arrays, found by
-- bisection (at: width_bucket over the sorted starts): a lookup, not a
-- join. Joined with the arrays unnested, the planner ran a nested loop that
-- unnested every array again for every row, in custom plans too: 3.4 ms
-- for a batch of 100 (0.6 ms now), and 0.9 s for 2,000 in a generic plan
-- (TestLockedBatchScalesWithSlots). A row whose start is not at its
-- position (arrays not sorted) is not written, and the statement returns
-- how many were: finish fails the batch rather than commit its work with
-- outcomes missing. It is sent at most outcomesPerStatement outcomes at
-- once. A completion found stale (see stale) is written as the next
-- generation, which the trigger records as a re-open carrying the run.
WITH d AS (
UPDATE {{.schema}}.slot AS s SET
    status = {{at "v.status"}}, fence = {{at "v.fence"}}, attempts = {{at "v.attempts"}}, fail_count = {{at "v.fail_count"}},
    message = {{at "v.message"}}, owner = NULL, lease_until = NULL,
    not_before = {{notBefore (at "v.delay_us")}},
    data = coalesce({{at "v.data"}}, s.data),
    completed_at = CASE WHEN {{at "v.status"}} = 'COMPLETE' THEN clock_timestamp() ELSE s.completed_at END,
    completed_by = CASE WHEN {{at "v.status"}} = 'COMPLETE' THEN $11::uuid END,
    {{template "stale" (set . "status" (at "v.status") "fence" (at "v.fence") "since" "now()")}},
    updated_at = clock_timestamp()
FROM (SELECT $3::timestamptz[] AS slot_start, $4::text[] AS status, $5::bigint[] AS fence, $6::int[] AS attempts,
        $7::int[] AS fail_count, $8::text[] AS message, $9::bigint[] AS delay_us, $10::jsonb[] AS data) AS v
WHERE s.name = $1 AND s."interval" = $2 AND {{template "listed" .}} AND {{at "v.slot_start"}} = s.slot_start
RETURNING 1
)
SELECT count(*) FROM d, (SELECT {{template "runOwner" "$11"}}) AS o
