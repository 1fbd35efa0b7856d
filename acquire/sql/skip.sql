-- Skips the slot starting at $3 whose lease is held (owner $4, fence $5;
-- see guard), with reason $6.
WITH d AS (
UPDATE {{.schema}}.slot SET
    status = 'SKIP', owner = NULL, lease_until = NULL, not_before = NULL, message = $6, updated_at = clock_timestamp()
WHERE {{template "guard" .}}
RETURNING slot_start, generation, fence, attempts)
{{template "logEvent" .}}
SELECT clock_timestamp(), $1, $2, d.slot_start, 'skipped', d.generation, $4, d.fence, d.attempts, left($6, 1024) FROM d
