DROP TRIGGER IF EXISTS slot_moved ON {{schema}}.slot;
DROP TRIGGER IF EXISTS slot_truncated ON {{schema}}.slot;
DROP TRIGGER IF EXISTS slot_deleted ON {{schema}}.slot;
DROP FUNCTION IF EXISTS {{schema}}.slot_forget_stored();
DROP FUNCTION IF EXISTS {{schema}}.slot_deleted();
DROP INDEX IF EXISTS {{schema}}.slot_skip_idx;
ALTER TABLE {{schema}}.series DROP COLUMN IF EXISTS slot_deletions;
DROP TABLE IF EXISTS {{schema}}.slot_compacted;
DROP TABLE IF EXISTS {{schema}}.slot_stored;
