-- Back to the previous version: no controls on the series row.
ALTER TABLE {{schema}}.series DROP COLUMN lag;
