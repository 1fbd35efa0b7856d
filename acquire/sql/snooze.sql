-- Gives the slot starting at $3 back (owner $4, fence $5; see guard) to be
-- taken again in $6 microseconds (NULL at once), without counting a
-- failure; $7 is its checkpoint and $8 its message (NULL keeps the one it
-- has).
WITH d AS (
UPDATE {{.schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, data = coalesce($7, s.data), message = coalesce($8::text, s.message),
    not_before = {{notBefore "v.delay_us"}}, updated_at = clock_timestamp()
FROM (SELECT $6::bigint AS delay_us) AS v
WHERE {{template "guard" .}}
RETURNING slot_start, generation, fence, attempts)
{{template "logEvent" .}}
SELECT clock_timestamp(), $1, $2, d.slot_start, 'snoozed', d.generation, $4, d.fence, d.attempts, left($8::text, 1024) FROM d
