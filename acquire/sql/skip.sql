-- Skips the slot starting at $3 whose lease is held (owner $4, fence $5;
-- see guard), with reason $6 (recorded by slot_record).
UPDATE {{.schema}}.slot SET
    status = 'SKIP', owner = NULL, lease_until = NULL, not_before = NULL, message = $6, updated_at = clock_timestamp()
WHERE {{template "guard" .}}
