-- almanac schema: controls stored on the series row and obeyed by every
-- process that works on the series.
--
-- lag: a slot is due once slot_end + lag has passed on the database clock.
-- NULL (the default) stores none: a worker then uses its job's own lag
-- (Policy.Lag), and coverage reports judge due-ness with a lag of 0. When
-- set, a claim uses the larger of the series' lag and the job's, so no
-- process can run a slot before the series says it is due; coverage
-- reports count a slot without a row that is not due yet as "not due",
-- never as missing.
ALTER TABLE {{schema}}.series ADD COLUMN lag interval,
    ADD CONSTRAINT series_lag_check CHECK (lag IS NULL OR lag >= interval '0');
