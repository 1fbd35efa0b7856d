-- A locked-mode failure recorded after its transaction died (see
-- recordOutOfBand), of the slot starting at $3: only if the slot is as that
-- transaction found it (fence $4, and not held by a live lease). It waits
-- for the row lock (under a short lock_timeout) because the dead
-- transaction's backend may take a moment to release it. A lease its old
-- holder renewed meanwhile is left alone. $5 is the fence the transaction
-- took, $6 attempts, $7 the fail count, $8 the message, $9 the delay
-- (microseconds; negative parks the slot). The slot table's trigger
-- records the failure (slot_record), as the run of the owner the
-- transaction names (see runOwner).
WITH target AS (
    SELECT slot_start FROM {{.schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND slot_start = $3 AND fence = $4
      AND (status = 'AVAILABLE' OR status = 'ACQUIRED' AND lease_until < clock_timestamp())
    FOR NO KEY UPDATE
)
UPDATE {{.schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, fence = $5, attempts = $6, fail_count = $7,
    message = $8, not_before = {{notBefore "v.delay_us"}}, updated_at = clock_timestamp()
FROM target AS t, (SELECT $9::bigint AS delay_us) AS v
WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = t.slot_start
