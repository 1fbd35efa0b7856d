-- complete for the leases $3 (with fences $5) of owner $4 (see held); it
-- returns the starts of the slots completed.
UPDATE {{.schema}}.slot AS s SET {{template "completed" .}}
WHERE {{template "held" .}}
RETURNING s.slot_start
