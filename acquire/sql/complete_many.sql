-- complete for the leases $3 (with fences $5) of owner $4 (see held); it
-- returns the starts of the slots completed.
UPDATE {{.schema}}.slot AS s SET
    status = 'COMPLETE', owner = NULL, lease_until = NULL, not_before = NULL, fail_count = 0,
    message = NULL, completed_at = clock_timestamp(), completed_by = $4, updated_at = clock_timestamp()
WHERE {{template "held" .}}
RETURNING s.slot_start
