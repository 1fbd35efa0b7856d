-- Whether the series ($1 name, $2 interval) has a cap (see capped).
SELECT coalesce(bool_or(max_in_flight IS NOT NULL), false) FROM {{.schema}}.series WHERE name = $1 AND "interval" = $2
