-- almanac schema, version 4: a completion is recorded on the slot's row, not
-- as a history row of its own.
--
-- Before, every completion inserted a 'completed' row into slot_event, so
-- history grew with every slot ever done (and twice per re-computation:
-- completed, then reopened), its slot_start index outgrew memory under
-- sustained load and slowed every insert. Now the row keeps its completion
-- (completed_at, completed_by, fence, attempts, generation) until a re-open
-- replaces it, and the re-open's own history row carries it: a slot done
-- once writes no history at all, a re-computation one row instead of two.
-- The view slot_history shows both as events, as before.

-- The owner of the run that completed the slot (NULL when it is not
-- COMPLETE, when plain SQL completed it, or when it was completed before
-- version 4, whose completions are rows of slot_event).
ALTER TABLE {{schema}}.slot ADD COLUMN completed_by uuid;

-- On a 'reopened' event: when the computation it ended had completed (its
-- owner, fence and attempt are then the completing run's); NULL otherwise.
ALTER TABLE {{schema}}.slot_event ADD COLUMN completed_at timestamptz;

-- A slot's history as events, oldest first by at: the rows of slot_event,
-- the completion each re-open carries as a 'completed' event of its own
-- (generation one less: the computation it ended), and the current
-- completion of every COMPLETE row. Read it instead of slot_event; filter by
-- name, "interval" and slot_start, which every branch has indexed.
CREATE VIEW {{schema}}.slot_history AS
SELECT e.at, e.name, e."interval", e.slot_start, e.event, e.generation,
    CASE WHEN e.completed_at IS NULL THEN e.owner END AS owner,
    CASE WHEN e.completed_at IS NULL THEN e.fence END AS fence,
    CASE WHEN e.completed_at IS NULL THEN e.attempt END AS attempt,
    e.actor, e.message
FROM {{schema}}.slot_event e
UNION ALL
SELECT e.completed_at, e.name, e."interval", e.slot_start, 'completed', e.generation - 1, e.owner, e.fence, e.attempt, NULL, NULL
FROM {{schema}}.slot_event e
WHERE e.completed_at IS NOT NULL
UNION ALL
SELECT s.completed_at, s.name, s."interval", s.slot_start, 'completed', s.generation, s.completed_by, s.fence, s.attempts, NULL, NULL
FROM {{schema}}.slot s
WHERE s.status = 'COMPLETE' AND s.completed_by IS NOT NULL;

-- The plain-SQL update trigger of version 2, which also moves the
-- completion a re-open ends into the 'reopened' event.
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
