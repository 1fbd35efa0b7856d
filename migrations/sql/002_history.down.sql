DROP TRIGGER IF EXISTS slot_sql_update ON {{schema}}.slot;
DROP TRIGGER IF EXISTS slot_sql_insert ON {{schema}}.slot;
DROP FUNCTION IF EXISTS {{schema}}.slot_sql_insert();
DROP FUNCTION IF EXISTS {{schema}}.slot_sql_update();
DROP FUNCTION IF EXISTS {{schema}}.wake_channel();
DROP TABLE IF EXISTS {{schema}}.slot_event;
DROP TABLE IF EXISTS {{schema}}.settings;
ALTER TABLE {{schema}}.slot DROP COLUMN IF EXISTS generation;
