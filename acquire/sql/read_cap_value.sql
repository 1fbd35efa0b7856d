-- The series' cap ($1 name, $2 interval), 0 without one.
SELECT coalesce(max(max_in_flight), 0) FROM {{.schema}}.series WHERE name = $1 AND "interval" = $2
