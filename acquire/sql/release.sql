-- Gives the slot starting at $3 back (owner $4, fence $5; see guard) as it
-- was, acquirable at once.
WITH d AS (
UPDATE {{.schema}}.slot SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, updated_at = clock_timestamp()
WHERE {{template "guard" .}}
RETURNING slot_start, generation, fence, attempts)
{{template "logEvent" .}}
SELECT clock_timestamp(), $1, $2, d.slot_start, 'released', d.generation, $4, d.fence, d.attempts, NULL FROM d
