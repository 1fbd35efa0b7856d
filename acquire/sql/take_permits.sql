-- Takes $3 permits of the series ($1 name, $2 interval) for a locked-mode
-- transaction, up to the cap $4: row locks on series_permit rows no other
-- transaction holds, which end with the transaction however it ends. Run
-- while the series row is locked (lock_series), after count_permits.
SELECT count(*) FROM (
    SELECT 1 FROM {{.schema}}.series_permit
    WHERE name = $1 AND "interval" = $2 AND k <= $4
    ORDER BY k LIMIT $3
    FOR UPDATE SKIP LOCKED) AS p
