-- Back to version 5's B-tree on the history's slot start, and autovacuum's
-- defaults for the history.
ALTER TABLE {{schema}}.slot_event RESET (autovacuum_vacuum_insert_threshold, autovacuum_vacuum_insert_scale_factor);
DROP INDEX {{schema}}.slot_event_slot_idx;
CREATE INDEX slot_event_slot_idx ON {{schema}}.slot_event (slot_start);
