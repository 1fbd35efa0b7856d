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

-- Version 10's reopen_downstream, slot_reopen_downstream and
-- slot_stale_finish, which record their own events.
CREATE OR REPLACE FUNCTION {{schema}}.reopen_downstream(up_name text, up_interval text, lo timestamptz, hi timestamptz) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    d record;
    packed record;
    cause text := upstream_cause(up_name, up_interval, lo);
    -- The plain-SQL trigger's test (migration 8), as the updates below
    -- see it (current_user is this function's owner): where that trigger
    -- records the re-open, this one does not, so each is recorded once.
    engine boolean := current_setting('almanac.engine', true) = 'on'
        AND has_table_privilege(current_user, 'slot_event', 'INSERT');
BEGIN
    FOR d IN SELECT sd.name, sd."interval" FROM series_dependency sd
        WHERE sd.up_name = reopen_downstream.up_name AND sd.up_interval = reopen_downstream.up_interval
        ORDER BY sd.name, sd."interval"
    LOOP
        SELECT c.range_start, c.range_end INTO packed FROM slot_compacted c
        WHERE c.name = d.name AND c."interval" = d."interval" AND c.range_start < hi AND c.range_end > lo
        ORDER BY c.range_start LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'cannot re-open %: downstream series % % has compacted slots in [%, %), which have no row to re-open',
                cause, d.name, d."interval", to_char(packed.range_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                to_char(packed.range_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                USING ERRCODE = 'object_not_in_prerequisite_state',
                HINT = 'Re-open those downstream slots first (almanac reopen), which brings their rows back; then re-open the upstream slots again.';
        END IF;
        UPDATE slot s SET reopen_cause = cause
        WHERE s.ctid = ANY(ARRAY(SELECT l.ctid FROM slot l
            WHERE l.name = d.name AND l."interval" = d."interval" AND l.status = 'ACQUIRED'
              AND l.slot_start < hi AND l.slot_end > lo
            FOR NO KEY UPDATE SKIP LOCKED))
          AND s.status = 'ACQUIRED';
        WITH r AS (
            UPDATE slot s SET status = 'AVAILABLE', generation = s.generation + 1, attempts = 0, fail_count = 0,
                data = NULL, completed_at = NULL, completed_by = NULL, not_before = NULL, message = cause, updated_at = clock_timestamp()
            WHERE s.name = d.name AND s."interval" = d."interval" AND s.status IN ('COMPLETE', 'SKIP')
              AND s.slot_start < hi AND s.slot_end > lo
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
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.slot_reopen_downstream() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    PERFORM reopen_downstream(NEW.name, NEW."interval", NEW.slot_start, NEW.slot_end);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.slot_stale_finish() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    IF NEW.status = 'COMPLETE' AND NEW.generation = OLD.generation THEN
        INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, attempt, completed_at, actor, message)
        VALUES (NEW.name, NEW."interval", NEW.slot_start, 'reopened', NEW.generation + 1, NEW.completed_by, NEW.fence, NEW.attempts,
            CASE WHEN NEW.completed_by IS NOT NULL THEN NEW.completed_at END,
            left(coalesce(nullif(current_setting('almanac.actor', true), ''), session_user), 256), left(NEW.reopen_cause, 1024));
        NEW.status := 'AVAILABLE';
        NEW.generation := NEW.generation + 1;
        NEW.attempts := 0;
        NEW.fail_count := 0;
        NEW.data := NULL;
        NEW.completed_at := NULL;
        NEW.completed_by := NULL;
        NEW.not_before := NULL;
        NEW.message := NEW.reopen_cause;
        PERFORM pg_notify(wake_channel(), json_build_object('name', NEW.name, 'interval', NEW."interval", 'reason', 'upstream')::text);
    END IF;
    NEW.reopen_cause := NULL;
    RETURN NEW;
END
$$;
