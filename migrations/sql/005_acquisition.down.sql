-- Back to version 4's acquisition index, in the primary key's order.
DROP INDEX {{schema}}.slot_available_idx;
CREATE INDEX slot_available_idx ON {{schema}}.slot (name, "interval", slot_start)
    WHERE status = 'AVAILABLE';
