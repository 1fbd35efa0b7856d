-- Takes $3 permits of the series ($1 name, $2 interval) for a locked-mode
-- transaction: the lowest permit numbers no transaction holds, as
-- transaction-level advisory locks, which end with the transaction. Run
-- while the series row is locked (lock_series), so no other admission
-- picks the same numbers; the cap bounds the numbers, $4.
SELECT count(pg_advisory_xact_lock({{template "permitKey"}}::int, k::int))
FROM (SELECT k FROM generate_series(1, $4::int) AS k
    WHERE NOT EXISTS (SELECT FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.objid = k::oid
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = {{template "permitKey"}}::oid)
    ORDER BY k LIMIT $3) AS free
