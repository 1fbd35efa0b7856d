-- Back to version 3, where every completion is a row of slot_event: the
-- completions recorded on rows and on re-open events become such rows first,
-- so no history is lost.
INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt)
SELECT completed_at, name, "interval", slot_start, 'completed', generation, completed_by, fence, attempts
FROM {{schema}}.slot WHERE status = 'COMPLETE' AND completed_by IS NOT NULL;
INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt)
SELECT completed_at, name, "interval", slot_start, 'completed', generation - 1, owner, fence, attempt
FROM {{schema}}.slot_event WHERE completed_at IS NOT NULL;
UPDATE {{schema}}.slot_event SET owner = NULL, attempt = NULL, completed_at = NULL WHERE completed_at IS NOT NULL;
DROP VIEW IF EXISTS {{schema}}.slot_history;
CREATE OR REPLACE FUNCTION {{schema}}.slot_sql_update() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    kind text := 'changed_by_sql';
BEGIN
    IF OLD.status IN ('COMPLETE', 'SKIP') THEN
        kind := 'reopened';
        IF NEW.generation = OLD.generation THEN NEW.generation := OLD.generation + 1; END IF;
        IF NEW.attempts = OLD.attempts THEN NEW.attempts := 0; END IF;
        IF NEW.fail_count = OLD.fail_count THEN NEW.fail_count := 0; END IF;
        IF NEW.data IS NOT DISTINCT FROM OLD.data THEN NEW.data := NULL; END IF;
        IF NEW.completed_at IS NOT DISTINCT FROM OLD.completed_at THEN NEW.completed_at := NULL; END IF;
    END IF;
    IF NEW.updated_at = OLD.updated_at THEN NEW.updated_at := clock_timestamp(); END IF;
    INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, actor, message)
    VALUES (NEW.name, NEW."interval", NEW.slot_start, kind, NEW.generation, OLD.owner, OLD.fence,
        left(coalesce(nullif(current_setting('almanac.actor', true), ''),
            session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')), 256),
        left(NEW.message, 1024));
    IF NEW.not_before IS NULL OR NEW.not_before <= clock_timestamp() THEN
        PERFORM pg_notify(wake_channel(), json_build_object('name', NEW.name, 'interval', NEW."interval", 'reason', 'sql')::text);
    END IF;
    RETURN NEW;
END
$$;
ALTER TABLE {{schema}}.slot_event DROP COLUMN IF EXISTS completed_at;
ALTER TABLE {{schema}}.slot DROP COLUMN IF EXISTS completed_by;
