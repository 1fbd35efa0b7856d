-- Compacted finished slots have no row: dropping slot_compacted would turn
-- them into gaps, which workers would run again. Refuse while there are
-- any; re-open them first to keep them (their rows come back), or delete
-- the rows of slot_compacted to discard them.
DO $$
DECLARE
    ranges bigint;
BEGIN
    SELECT count(*) INTO ranges FROM {{schema}}.slot_compacted;
    IF ranges > 0 THEN
        RAISE EXCEPTION 'cannot undo migration 3: % compacted range(s) of finished slots would become gaps that workers run again; re-open them first to keep them (almanac reopen), or discard them (almanac migrate down --discard, or DELETE FROM slot_compacted)', ranges
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
DROP TRIGGER IF EXISTS slot_moved ON {{schema}}.slot;
DROP TRIGGER IF EXISTS slot_truncated ON {{schema}}.slot;
DROP TRIGGER IF EXISTS slot_deleted ON {{schema}}.slot;
DROP FUNCTION IF EXISTS {{schema}}.slot_forget_stored();
DROP FUNCTION IF EXISTS {{schema}}.slot_deleted();
DROP INDEX IF EXISTS {{schema}}.slot_skip_idx;
ALTER TABLE {{schema}}.series DROP COLUMN IF EXISTS slot_deletions;
DROP TABLE IF EXISTS {{schema}}.slot_compacted;
DROP TABLE IF EXISTS {{schema}}.slot_stored;
