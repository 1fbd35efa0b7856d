-- Gives the slot starting at $3 back (owner $4, fence $5; see guard) to be
-- taken again in $6 microseconds (NULL at once), without counting a
-- failure; $7 is its checkpoint and $8 its message (NULL keeps the one it
-- has). Recorded as snoozed by slot_record (or released, when it saves
-- nothing and waits for nothing: it is one).
UPDATE {{.schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, data = coalesce($7, s.data), message = coalesce($8::text, s.message),
    not_before = {{notBefore "v.delay_us"}}, updated_at = clock_timestamp()
FROM (SELECT $6::bigint AS delay_us) AS v
WHERE {{template "guard" .}}
