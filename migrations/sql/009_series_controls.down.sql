-- Back to the previous version: no controls on the series row, no
-- dependencies.
DROP TRIGGER slot_reopen_downstream ON {{schema}}.slot;
DROP FUNCTION {{schema}}.slot_reopen_downstream();
DROP FUNCTION {{schema}}.upstream_done(text, text, timestamptz, timestamptz);
DROP TABLE {{schema}}.series_dependency;
DROP TRIGGER series_permits ON {{schema}}.series;
DROP FUNCTION {{schema}}.series_permits();
DROP TABLE {{schema}}.series_permit;
DROP TABLE {{schema}}.series_event;
ALTER TABLE {{schema}}.series DROP COLUMN lag, DROP COLUMN max_in_flight, DROP COLUMN paused_at, DROP COLUMN paused_by, DROP COLUMN paused_reason;
