-- Records a failure of the lease of the slot starting at $3 (owner $4,
-- fence $5; see guard): $6 the new fail count, $7 the message, $8 the
-- delay before the slot is acquirable again (microseconds; NULL none,
-- negative parks it). The slot table's trigger records it as failed, or
-- parked (slot_record).
UPDATE {{.schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, fail_count = $6, message = $7,
    not_before = {{notBefore "v.delay_us"}}, updated_at = clock_timestamp()
FROM (SELECT $8::bigint AS delay_us) AS v
WHERE {{template "guard" .}}
