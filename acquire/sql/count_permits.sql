-- Counts the permits of the series ($1 name, $2 interval) that other
-- locked-mode transactions hold, up to the cap $3, and the cap: the
-- permits it can lock are free, the rest are held. Run in a savepoint
-- that is rolled back at once, which lets go of the locks it took.
SELECT (SELECT count(*) FROM {{.schema}}.series_permit WHERE name = $1 AND "interval" = $2 AND k <= $3)
    - (SELECT count(*) FROM (SELECT 1 FROM {{.schema}}.series_permit
        WHERE name = $1 AND "interval" = $2 AND k <= $3 FOR UPDATE SKIP LOCKED) AS f)
