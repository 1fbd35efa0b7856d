-- Saves checkpoint $6 on the slot starting at $3, whose lease is held
-- (owner $4, fence $5; see guard).
UPDATE {{.schema}}.slot SET data = $6, updated_at = clock_timestamp() WHERE {{template "guard" .}}
