DROP TABLE IF EXISTS {{schema}}.slot;
DROP TABLE IF EXISTS {{schema}}.series;
DROP SEQUENCE IF EXISTS {{schema}}.fence_seq;
