-- Back to version 9: completions no longer test their upstream slots, and
-- the re-open trigger is migration 9's again.
DROP TRIGGER slot_stale_finish ON {{schema}}.slot;
DROP FUNCTION {{schema}}.slot_stale_finish();
DROP FUNCTION {{schema}}.stale_cause(text, text, timestamptz, timestamptz, bigint, timestamptz);
CREATE OR REPLACE FUNCTION {{schema}}.slot_reopen_downstream() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    d record;
    cause text;
    -- The plain-SQL trigger's test (migration 8), as the update below sees
    -- it (current_user is this function's owner): where that trigger
    -- records the re-open, this one does not, so each is recorded once.
    engine boolean := current_setting('almanac.engine', true) = 'on'
        AND has_table_privilege(current_user, quote_ident(TG_TABLE_SCHEMA) || '.slot_event', 'INSERT');
BEGIN
    FOR d IN SELECT sd.name, sd."interval" FROM series_dependency sd
        WHERE sd.up_name = NEW.name AND sd.up_interval = NEW."interval"
    LOOP
        cause := left(format('upstream %s %s/%s re-opened', NEW.name, to_char(NEW.slot_start AT TIME ZONE 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS"Z"'), NEW."interval"), 1024);
        WITH r AS (
            UPDATE slot s SET status = 'AVAILABLE', generation = s.generation + 1, attempts = 0, fail_count = 0,
                data = NULL, completed_at = NULL, completed_by = NULL, not_before = NULL, message = cause, updated_at = clock_timestamp()
            WHERE s.name = d.name AND s."interval" = d."interval" AND s.status IN ('COMPLETE', 'SKIP')
              AND s.slot_start < NEW.slot_end AND s.slot_end > NEW.slot_start
            RETURNING s.name, s."interval", s.slot_start, s.generation)
        INSERT INTO slot_event (name, "interval", slot_start, event, generation, actor, message)
        SELECT r.name, r."interval", r.slot_start, 'reopened', r.generation,
            left(coalesce(nullif(current_setting('almanac.actor', true), ''), session_user), 256), cause
        FROM r WHERE engine;
        IF engine THEN
            -- Plain SQL's own trigger wakes the workers otherwise.
            PERFORM pg_notify(wake_channel(), json_build_object('name', d.name, 'interval', d."interval", 'reason', 'upstream')::text);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
DROP FUNCTION {{schema}}.reopen_downstream(text, text, timestamptz, timestamptz);
DROP FUNCTION {{schema}}.upstream_cause(text, text, timestamptz);
ALTER TABLE {{schema}}.slot DROP COLUMN reopen_cause;
