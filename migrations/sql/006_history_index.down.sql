-- Back to version 5's B-tree on the history's slot start.
DROP INDEX {{schema}}.slot_event_slot_idx;
CREATE INDEX slot_event_slot_idx ON {{schema}}.slot_event (slot_start);
