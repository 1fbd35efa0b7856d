-- Back to the previous version: no controls on the series row.
DROP TABLE {{schema}}.series_event;
ALTER TABLE {{schema}}.series DROP COLUMN lag, DROP COLUMN paused_at, DROP COLUMN paused_by, DROP COLUMN paused_reason;
