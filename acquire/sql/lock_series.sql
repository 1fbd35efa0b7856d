-- Locks the series row ($1 name, $2 interval) for the rest of the
-- transaction, and so orders the admissions of a series with a cap: each
-- waits for the one before it to commit, then counts what is held (see
-- capFree). FOR NO KEY UPDATE does not block the foreign-key checks of
-- slot_frontier.
SELECT 1 FROM {{.schema}}.series WHERE name = $1 AND "interval" = $2 FOR NO KEY UPDATE
