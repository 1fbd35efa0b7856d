-- Records a failure of the lease of the slot starting at $3 (owner $4,
-- fence $5; see guard): $6 the new fail count, $7 the message, $8 the
-- delay before the slot is acquirable again (microseconds; NULL none,
-- negative parks it). The history event says failed, or parked.
WITH d AS (
UPDATE {{.schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, fail_count = $6, message = $7,
    not_before = {{notBefore "v.delay_us"}}, updated_at = clock_timestamp()
FROM (SELECT $8::bigint AS delay_us) AS v
WHERE {{template "guard" .}}
RETURNING slot_start, generation, fence, attempts, v.delay_us < 0 AS parked)
{{template "logEvent" .}}
SELECT clock_timestamp(), $1, $2, d.slot_start, CASE WHEN d.parked THEN 'parked' ELSE 'failed' END, d.generation, $4, d.fence, d.attempts, left($7, 1024) FROM d
