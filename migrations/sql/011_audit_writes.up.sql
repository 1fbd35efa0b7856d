-- almanac schema, version 11: the slots' history is written only by a
-- trigger that runs as the schema's owner, from the change each row
-- underwent; no other role may insert history, and no setting keeps a
-- change out of it.
--
-- Before, the engine wrote its events with plain INSERTs into slot_event,
-- so the runtime role kept INSERT there: it could append events for
-- changes that never happened, and, being allowed to insert history, set
-- almanac.engine = 'on' to keep its own plain-SQL re-opens out of it. Now
-- slot_record, an AFTER UPDATE trigger (SECURITY DEFINER), writes every
-- event from the row's old and new versions: an event exists only for a
-- change the statement made, and what it says (kind, generation, fence,
-- attempt, the run or completion it ends) is read from the rows.
--
-- What the rows cannot say, the transaction's settings do, and only
-- those details: almanac.actor (who asked, for changes not made by a
-- run), almanac.owner (the owner of a locked-mode run, which the row never
-- holds) and almanac.engine (the engine's labels for its own changes, no
-- wake-up from the triggers). A role can give a misleading actor or owner
-- there, never an event without its change.

-- slot_record writes the events of one row's change (see the trigger's
-- WHEN clause for the changes that have any):
--   - a lease ended by another run (a new fence on an ACQUIRED row): the
--     run that lost it, 'taken_over' when its lease had expired (by a
--     lease claim, or a locked-mode run, dated at the start of its
--     transaction, when it took the slot), else 'ejected';
--   - a re-open (COMPLETE or SKIP to AVAILABLE, or a new generation):
--     'reopened', carrying the completion it ends (see migration 004);
--   - for almanac's own changes (almanac.engine on), the run's outcome (the
--     lease's holder, whose fence the row keeps, or a locked-mode run,
--     which wrote a fence of its own): 'failed' (the fail count grew),
--     'parked' (not before infinity), 'skipped', 'snoozed' or 'released'
--     (given back at once with nothing saved); an operator's change:
--     'skipped', 'retried' (backoff cleared);
--   - for plain SQL: 'skipped', and 'changed_by_sql' for other changes
--     that make a slot acquirable, as version 2 did.
-- A completion writes nothing: the row records it (completed_by). Actors
-- and messages are cut to 256 and 1024 characters, which the table's byte
-- bounds always admit; settings are text in the database's encoding.
CREATE FUNCTION {{schema}}.slot_record() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    engine boolean := current_setting('almanac.engine', true) IS NOT DISTINCT FROM 'on';
    actor text := left(coalesce(nullif(current_setting('almanac.actor', true), ''),
        CASE WHEN engine THEN session_user::text
            ELSE session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '') END), 256);
    -- The row's run: the lease's holder (its fence unchanged), or a
    -- locked-mode run, which writes the fence it took.
    run boolean := OLD.status = 'ACQUIRED' OR NEW.fence <> OLD.fence;
    run_owner uuid;
    expired boolean := OLD.lease_until < clock_timestamp();
    kind text;
    ended_owner uuid;
    ended_fence bigint;
    ended_attempt integer;
    ended_at timestamptz;
BEGIN
    IF OLD.status = 'ACQUIRED' AND NEW.fence <> OLD.fence THEN
        INSERT INTO slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt, actor, message)
        VALUES (CASE WHEN NEW.status = 'ACQUIRED' THEN clock_timestamp() ELSE now() END,
            NEW.name, NEW."interval", NEW.slot_start,
            CASE WHEN NEW.status = 'ACQUIRED' AND NOT expired THEN 'ejected' ELSE 'taken_over' END,
            NEW.generation, OLD.owner, OLD.fence, OLD.attempts,
            CASE WHEN NOT engine THEN actor END,
            CASE WHEN NEW.status <> 'ACQUIRED' THEN 'lease expired; taken over by a locked-mode worker'
                WHEN NOT expired THEN format('ejected by %s with fence %s', NEW.owner, NEW.fence)
                ELSE format('lease expired; taken over by %s with fence %s', NEW.owner, NEW.fence) END);
    END IF;

    IF NEW.status = 'AVAILABLE' AND (OLD.status IN ('COMPLETE', 'SKIP') OR NEW.generation > OLD.generation) THEN
        IF OLD.status = 'COMPLETE' AND OLD.completed_by IS NOT NULL THEN
            ended_owner := OLD.completed_by;
            ended_fence := OLD.fence;
            ended_attempt := OLD.attempts;
            ended_at := OLD.completed_at;
        END IF;
        INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, attempt, completed_at, actor, message)
        VALUES (NEW.name, NEW."interval", NEW.slot_start, 'reopened', NEW.generation, ended_owner, ended_fence, ended_attempt,
            ended_at, actor, left(NEW.message, 1024));
        RETURN NULL;
    END IF;
    IF NEW.status IN ('COMPLETE', 'ACQUIRED') THEN
        RETURN NULL; -- on the row, or the takeover above
    END IF;

    IF NEW.status = 'SKIP' AND (OLD.status <> 'SKIP' OR run) THEN
        kind := 'skipped';
    ELSIF NOT engine THEN
        kind := 'changed_by_sql';
    ELSIF run AND NEW.not_before = 'infinity' AND NEW.fail_count > OLD.fail_count THEN
        kind := 'parked';
    ELSIF run AND NEW.fail_count > OLD.fail_count THEN
        kind := 'failed';
    ELSIF run AND NEW.not_before IS NULL AND NEW.data IS NOT DISTINCT FROM OLD.data
            AND NEW.message IS NOT DISTINCT FROM OLD.message THEN
        kind := 'released';
    ELSIF run THEN
        kind := 'snoozed';
    ELSIF NEW.status = 'AVAILABLE' AND NEW.not_before IS NULL AND OLD.not_before IS NOT NULL THEN
        kind := 'retried';
    ELSE
        kind := 'changed_by_sql';
    END IF;

    IF NOT engine OR NOT run THEN
        -- Plain SQL, or an operator: who asked, and the run the change
        -- ended if it ended one.
        INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, attempt, actor, message)
        VALUES (NEW.name, NEW."interval", NEW.slot_start, kind, NEW.generation,
            OLD.owner, CASE WHEN OLD.status = 'ACQUIRED' OR NOT engine THEN OLD.fence END,
            CASE WHEN OLD.status = 'ACQUIRED' THEN OLD.attempts END, actor,
            CASE WHEN kind = 'retried' THEN
                CASE WHEN OLD.not_before = 'infinity' THEN 'un-parked: the retry policy starts afresh' ELSE 'backoff cleared' END
            ELSE left(NEW.message, 1024) END);
        RETURN NULL;
    END IF;
    IF OLD.status = 'ACQUIRED' AND NEW.fence = OLD.fence THEN
        run_owner := OLD.owner;
    ELSIF current_setting('almanac.owner', true) ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        run_owner := current_setting('almanac.owner', true)::uuid;
    END IF;
    INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, attempt, message)
    VALUES (NEW.name, NEW."interval", NEW.slot_start, kind, NEW.generation, run_owner, NEW.fence, NEW.attempts,
        CASE WHEN kind IN ('failed', 'parked', 'skipped') OR kind = 'snoozed' AND NEW.message IS DISTINCT FROM OLD.message
            THEN left(NEW.message, 1024) END);
    RETURN NULL;
END
$$;

-- Fires for the changes that have events, and only those: the test costs
-- a few comparisons per updated row, and claims, heartbeats, checkpoints
-- and completions (the hot path) fail it at its first or second.
CREATE TRIGGER slot_record AFTER UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN ((OLD.status = 'ACQUIRED' AND NEW.fence <> OLD.fence)
        OR (NEW.status <> 'COMPLETE' AND NEW.status <> 'ACQUIRED'
            AND (NEW.status <> OLD.status OR NEW.fence <> OLD.fence OR NEW.generation <> OLD.generation
                OR NEW.not_before IS DISTINCT FROM OLD.not_before)))
    EXECUTE FUNCTION {{schema}}.slot_record();

-- The plain-SQL update trigger (versions 2, 4 and 8) now only completes a
-- re-open's columns and wakes the workers: slot_record writes the event.
-- almanac.engine skips the wake-up, for any role, since it no longer hides
-- anything from the history; a re-open that left the generation as it was
-- is completed whatever the setting (almanac's own re-opens start the next
-- generation themselves, and never reach the trigger).
CREATE OR REPLACE FUNCTION {{schema}}.slot_sql_update() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    IF OLD.status IN ('COMPLETE', 'SKIP') THEN
        IF NEW.generation = OLD.generation THEN NEW.generation := OLD.generation + 1; END IF;
        IF NEW.attempts = OLD.attempts THEN NEW.attempts := 0; END IF;
        IF NEW.fail_count = OLD.fail_count THEN NEW.fail_count := 0; END IF;
        IF NEW.data IS NOT DISTINCT FROM OLD.data THEN NEW.data := NULL; END IF;
        IF NEW.completed_at IS NOT DISTINCT FROM OLD.completed_at THEN NEW.completed_at := NULL; END IF;
        IF NEW.completed_by IS NOT DISTINCT FROM OLD.completed_by THEN NEW.completed_by := NULL; END IF;
    END IF;
    IF NEW.updated_at = OLD.updated_at THEN NEW.updated_at := clock_timestamp(); END IF;
    IF current_setting('almanac.engine', true) IS DISTINCT FROM 'on'
            AND (NEW.not_before IS NULL OR NEW.not_before <= clock_timestamp()) THEN
        PERFORM pg_notify(wake_channel(), json_build_object('name', NEW.name, 'interval', NEW."interval", 'reason', 'sql')::text);
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER slot_sql_update ON {{schema}}.slot;
CREATE TRIGGER slot_sql_update BEFORE UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (NEW.status = 'AVAILABLE' AND (OLD.status <> 'AVAILABLE' OR NEW.not_before IS DISTINCT FROM OLD.not_before)
        AND (OLD.status IN ('COMPLETE', 'SKIP') AND NEW.generation = OLD.generation
            OR current_setting('almanac.engine', true) IS DISTINCT FROM 'on'))
    EXECUTE FUNCTION {{schema}}.slot_sql_update();

-- The downstream re-open of version 9 without its own events: its update
-- fires slot_record like any other.
CREATE OR REPLACE FUNCTION {{schema}}.slot_reopen_downstream() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    d record;
    cause text;
BEGIN
    FOR d IN SELECT sd.name, sd."interval" FROM series_dependency sd
        WHERE sd.up_name = NEW.name AND sd.up_interval = NEW."interval"
    LOOP
        cause := left(format('upstream %s %s/%s re-opened', NEW.name, to_char(NEW.slot_start AT TIME ZONE 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS"Z"'), NEW."interval"), 1024);
        UPDATE slot s SET status = 'AVAILABLE', generation = s.generation + 1, attempts = 0, fail_count = 0,
            data = NULL, completed_at = NULL, completed_by = NULL, not_before = NULL, message = cause, updated_at = clock_timestamp()
        WHERE s.name = d.name AND s."interval" = d."interval" AND s.status IN ('COMPLETE', 'SKIP')
          AND s.slot_start < NEW.slot_end AND s.slot_end > NEW.slot_start;
        IF current_setting('almanac.engine', true) = 'on' THEN
            -- Plain SQL's own trigger wakes the workers otherwise.
            PERFORM pg_notify(wake_channel(), json_build_object('name', d.name, 'interval', d."interval", 'reason', 'upstream')::text);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Take INSERT on slot_event back from every role but the owner (default
-- privileges granted it to the runtime role), as migrations.Grants does
-- for a schema created afterwards.
CREATE FUNCTION {{schema}}.revoke_rewrites() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS role
        FROM pg_class c
        CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE c.oid = 'slot_event'::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('REVOKE INSERT ON slot_event FROM %s', g.role);
    END LOOP;
END
$$;
SELECT {{schema}}.revoke_rewrites();
DROP FUNCTION {{schema}}.revoke_rewrites();
