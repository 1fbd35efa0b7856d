-- Completes the lease of the slot starting at $3 (owner $4, fence $5; see
-- guard). A completion is recorded on the row (completed_at,
-- completed_by), not as a history event: a re-open moves it into its own
-- event (see migration 004 and the slot_history view).
UPDATE {{.schema}}.slot AS s SET {{template "completed" .}}
WHERE {{template "guard" .}}
