-- Back to version 10: the engine writes its own events again, which needs
-- INSERT on slot_event for the runtime role. That privilege is not given
-- back (which roles had it is not recorded): re-run the grants of version
-- 10 (almanac migrate grants) for it.
DROP TRIGGER slot_record ON {{schema}}.slot;
DROP FUNCTION {{schema}}.slot_record();

-- The plain-SQL update trigger of version 8, which records its changes.
CREATE OR REPLACE FUNCTION {{schema}}.slot_sql_update() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    kind text := 'changed_by_sql';
    ended_owner uuid := OLD.owner;
    ended_at timestamptz;
    ended_attempt integer;
BEGIN
    IF OLD.status IN ('COMPLETE', 'SKIP') THEN
        kind := 'reopened';
        IF OLD.status = 'COMPLETE' AND OLD.completed_by IS NOT NULL THEN
            ended_owner := OLD.completed_by;
            ended_at := OLD.completed_at;
            ended_attempt := OLD.attempts;
        END IF;
        IF NEW.generation = OLD.generation THEN NEW.generation := OLD.generation + 1; END IF;
        IF NEW.attempts = OLD.attempts THEN NEW.attempts := 0; END IF;
        IF NEW.fail_count = OLD.fail_count THEN NEW.fail_count := 0; END IF;
        IF NEW.data IS NOT DISTINCT FROM OLD.data THEN NEW.data := NULL; END IF;
        IF NEW.completed_at IS NOT DISTINCT FROM OLD.completed_at THEN NEW.completed_at := NULL; END IF;
        IF NEW.completed_by IS NOT DISTINCT FROM OLD.completed_by THEN NEW.completed_by := NULL; END IF;
    END IF;
    IF NEW.updated_at = OLD.updated_at THEN NEW.updated_at := clock_timestamp(); END IF;
    INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, attempt, completed_at, actor, message)
    VALUES (NEW.name, NEW."interval", NEW.slot_start, kind, NEW.generation, ended_owner, OLD.fence, ended_attempt, ended_at,
        left(coalesce(nullif(current_setting('almanac.actor', true), ''),
            session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')), 256),
        left(NEW.message, 1024));
    IF NEW.not_before IS NULL OR NEW.not_before <= clock_timestamp() THEN
        PERFORM pg_notify(wake_channel(), json_build_object('name', NEW.name, 'interval', NEW."interval", 'reason', 'sql')::text);
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER slot_sql_update ON {{schema}}.slot;
CREATE TRIGGER slot_sql_update BEFORE UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (NEW.status = 'AVAILABLE' AND (OLD.status <> 'AVAILABLE' OR NEW.not_before IS DISTINCT FROM OLD.not_before)
        AND (current_setting('almanac.engine', true) IS DISTINCT FROM 'on'
            OR NOT has_table_privilege(current_user, {{schema_literal}} || '.slot_event', 'INSERT')))
    EXECUTE FUNCTION {{schema}}.slot_sql_update();

-- The downstream re-open of version 9, which records its own events.
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
