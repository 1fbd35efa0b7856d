-- The series' controls ($1 name, $2 interval) that choose a queue's claim
-- statements (see controls): whether it has a cap, and whether it depends
-- on upstream series.
SELECT coalesce(bool_or(max_in_flight IS NOT NULL), false),
    EXISTS (SELECT FROM {{.schema}}.series_dependency WHERE name = $1 AND "interval" = $2)
FROM {{.schema}}.series WHERE name = $1 AND "interval" = $2
