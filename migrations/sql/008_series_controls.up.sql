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

-- paused_at: set while the series is paused. No process claims a paused
-- series' slots (the claim statement reads the row); slots held when it
-- was paused finish. paused_by and paused_reason say who paused it and why.
ALTER TABLE {{schema}}.series ADD COLUMN paused_at timestamptz,
    ADD COLUMN paused_by text,
    ADD COLUMN paused_reason text,
    ADD CONSTRAINT series_paused_by_check CHECK (octet_length(paused_by) <= 1024),
    ADD CONSTRAINT series_paused_reason_check CHECK (octet_length(paused_reason) <= 4096);

-- The history of series-wide changes (paused, resumed, set), append-only:
-- who changed a control, when and why, after the series row has moved on.
CREATE TABLE {{schema}}.series_event (
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    name       text        NOT NULL,
    "interval" text        NOT NULL,
    event      text        NOT NULL,
    actor      text,
    message    text,
    CONSTRAINT series_event_event_check CHECK (event IN ('paused', 'resumed', 'set')),
    CONSTRAINT series_event_actor_check CHECK (octet_length(actor) <= 1024),
    CONSTRAINT series_event_message_check CHECK (octet_length(message) <= 4096)
);
CREATE INDEX series_event_series_idx ON {{schema}}.series_event (name, "interval", at);
