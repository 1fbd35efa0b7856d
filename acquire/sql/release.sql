-- Gives the slot starting at $3 back (owner $4, fence $5; see guard) as it
-- was, acquirable at once (recorded as released by slot_record).
UPDATE {{.schema}}.slot SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, updated_at = clock_timestamp()
WHERE {{template "guard" .}}
