-- almanac schema, version 11: the slots' history is written only by a
-- trigger that runs as the schema's owner, from the change each row
-- underwent; no other role may insert history, and no setting keeps a
-- change out of it.
--
-- Before, the engine wrote its events with plain INSERTs into slot_event,
-- so the runtime role kept INSERT there: it could append events for
-- changes that never happened, and, being allowed to insert history, set
-- almanac.engine = 'on' to keep its own plain-SQL re-opens out of it. Now
-- slot_record, an AFTER UPDATE statement trigger (SECURITY DEFINER), writes every
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

-- slot_record writes the events of one statement's changes, in one
-- INSERT ... SELECT over the statement's transition tables (o, the rows
-- before, n after, joined on the primary key), in slot order and, for a
-- slot, in the order below. A row trigger did the same row by row, which
-- made a bulk re-open, skip or retry several times slower; the set-based
-- form costs one statement per UPDATE that has events, and a probe of
-- the transition tables for one that has none. Only the changes that have
-- events count (the row trigger's WHEN clause, now the query's WHERE):
--   - a lease ended by another run (a new fence on an ACQUIRED row): the
--     run that lost it, 'taken_over' when its lease had expired (by a
--     lease claim, or a locked-mode run, dated at the start of its
--     transaction, when it took the slot), else 'ejected';
--   - a re-open (COMPLETE or SKIP to AVAILABLE, or a new generation):
--     'reopened', carrying the completion it ends (see migration 004); a
--     completion found stale (slot_stale_finish, version 10: a run that
--     ends AVAILABLE as its next generation) carries the run's own: its
--     owner, fence and attempt, and updated_at, which that trigger sets to
--     the completion time;
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
-- bounds always admit; settings are text in the database's encoding. An
-- update that changes a slot's primary key has no event (its old and new
-- rows do not join); the runtime role cannot make one (migration 8).
CREATE FUNCTION {{schema}}.slot_record() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    engine boolean;
    actor text;
    named_owner uuid; -- the owner of a locked-mode run, which no row holds (runOwner)
BEGIN
    -- Most updates have no event: a claim, a heartbeat, a completion.
    -- They end here, before the settings are read and the events' query
    -- is started, which would be most of what such an update costs. The
    -- test is the events' WHERE clause below, widened so that only the
    -- leases' fences need the join.
    IF NOT EXISTS (
        SELECT FROM n WHERE n.status <> 'COMPLETE' AND n.status <> 'ACQUIRED'
        UNION ALL
        SELECT FROM o JOIN n ON n.name = o.name AND n."interval" = o."interval" AND n.slot_start = o.slot_start
        WHERE o.status = 'ACQUIRED' AND n.fence <> o.fence) THEN
        RETURN NULL;
    END IF;
    engine := current_setting('almanac.engine', true) IS NOT DISTINCT FROM 'on';
    actor := left(coalesce(nullif(current_setting('almanac.actor', true), ''),
        CASE WHEN engine THEN session_user::text
            ELSE session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '') END), 256);
    named_owner := CASE WHEN current_setting('almanac.owner', true)
        ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN current_setting('almanac.owner', true)::uuid END;
    INSERT INTO slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt, completed_at, actor, message)
    SELECT e.at, n.name, n."interval", n.slot_start, e.event, n.generation, e.owner, e.fence, e.attempt, e.completed_at, e.actor, e.message
    FROM o JOIN n ON n.name = o.name AND n."interval" = o."interval" AND n.slot_start = o.slot_start
    CROSS JOIN LATERAL (SELECT
        -- The row's run: the lease's holder (its fence unchanged), or a
        -- locked-mode run, which writes the fence it took.
        o.status = 'ACQUIRED' OR n.fence <> o.fence AS run,
        o.status = 'ACQUIRED' AND n.fence = o.fence AS leased,
        n.status = 'AVAILABLE' AND (o.status IN ('COMPLETE', 'SKIP') OR n.generation > o.generation) AS reopen) f
    CROSS JOIN LATERAL (SELECT CASE
        WHEN n.status = 'SKIP' AND (o.status <> 'SKIP' OR f.run) THEN 'skipped'
        WHEN NOT engine THEN 'changed_by_sql'
        WHEN f.run AND n.not_before = 'infinity' AND n.fail_count > o.fail_count THEN 'parked'
        WHEN f.run AND n.fail_count > o.fail_count THEN 'failed'
        WHEN f.run AND n.not_before IS NULL AND n.data IS NOT DISTINCT FROM o.data
            AND n.message IS NOT DISTINCT FROM o.message THEN 'released'
        WHEN f.run THEN 'snoozed'
        WHEN n.status = 'AVAILABLE' AND n.not_before IS NULL AND o.not_before IS NOT NULL THEN 'retried'
        ELSE 'changed_by_sql' END AS kind) k
    CROSS JOIN LATERAL (
        -- The lease another run ended.
        SELECT 1 AS part, CASE WHEN n.status = 'ACQUIRED' THEN clock_timestamp() ELSE now() END AS at,
            CASE WHEN n.status = 'ACQUIRED' AND NOT o.lease_until < clock_timestamp() THEN 'ejected' ELSE 'taken_over' END AS event,
            o.owner, o.fence, o.attempts AS attempt, NULL::timestamptz AS completed_at,
            CASE WHEN NOT engine THEN actor END AS actor,
            CASE WHEN n.status <> 'ACQUIRED' THEN 'lease expired; taken over by a locked-mode worker'
                WHEN NOT o.lease_until < clock_timestamp() THEN format('ejected by %s with fence %s', n.owner, n.fence)
                ELSE format('lease expired; taken over by %s with fence %s', n.owner, n.fence) END AS message
        WHERE o.status = 'ACQUIRED' AND n.fence <> o.fence
        UNION ALL
        -- A re-open of a completion or a skip.
        SELECT 2, clock_timestamp(), 'reopened',
            CASE WHEN o.status = 'COMPLETE' THEN o.completed_by END, CASE WHEN o.status = 'COMPLETE' AND o.completed_by IS NOT NULL THEN o.fence END,
            CASE WHEN o.status = 'COMPLETE' AND o.completed_by IS NOT NULL THEN o.attempts END,
            CASE WHEN o.status = 'COMPLETE' AND o.completed_by IS NOT NULL THEN o.completed_at END, actor, left(n.message, 1024)
        WHERE f.reopen AND (o.status IN ('COMPLETE', 'SKIP') OR NOT f.run)
        UNION ALL
        -- A run's completion found stale, made the next generation
        -- (version 10): the lease's holder (whoever wrote the completion:
        -- the engine, CompleteTx in the caller's transaction, or plain
        -- SQL), or the locked-mode run that runOwner names.
        SELECT 2, clock_timestamp(), 'reopened', CASE WHEN f.leased THEN o.owner ELSE named_owner END, n.fence,
            CASE WHEN f.leased THEN o.attempts ELSE o.attempts + 1 END, n.updated_at, actor, left(n.message, 1024)
        WHERE f.reopen AND o.status NOT IN ('COMPLETE', 'SKIP') AND f.run
        UNION ALL
        -- Plain SQL, or an operator: who asked, and the run the change
        -- ended if it ended one.
        SELECT 2, clock_timestamp(), k.kind, o.owner, CASE WHEN o.status = 'ACQUIRED' OR NOT engine THEN o.fence END,
            CASE WHEN o.status = 'ACQUIRED' THEN o.attempts END, NULL, actor,
            CASE WHEN k.kind = 'retried' THEN
                CASE WHEN o.not_before = 'infinity' THEN 'un-parked: the retry policy starts afresh' ELSE 'backoff cleared' END
            ELSE left(n.message, 1024) END
        WHERE NOT f.reopen AND n.status <> 'COMPLETE' AND n.status <> 'ACQUIRED' AND (NOT engine OR NOT f.run)
        UNION ALL
        -- A run's outcome.
        SELECT 2, clock_timestamp(), k.kind, CASE WHEN f.leased THEN o.owner ELSE named_owner END, n.fence, n.attempts, NULL, NULL,
            CASE WHEN k.kind IN ('failed', 'parked', 'skipped') OR k.kind = 'snoozed' AND n.message IS DISTINCT FROM o.message
                THEN left(n.message, 1024) END
        WHERE NOT f.reopen AND n.status <> 'COMPLETE' AND n.status <> 'ACQUIRED' AND engine AND f.run
    ) e
    WHERE (o.status = 'ACQUIRED' AND n.fence <> o.fence)
        OR (n.status <> 'COMPLETE' AND n.status <> 'ACQUIRED'
            AND (n.status <> o.status OR n.fence <> o.fence OR n.generation <> o.generation
                OR n.not_before IS DISTINCT FROM o.not_before))
    ORDER BY n.name, n."interval", n.slot_start, e.part;
    RETURN NULL;
END
$$;

-- One statement-level trigger: transition tables need FOR EACH STATEMENT
-- (or ROW) on a single event, with no column list and no WHEN clause, on
-- a table that is not a partition nor an inheritance child; slot is none
-- of those (PostgreSQL 10 and later).
CREATE TRIGGER slot_record AFTER UPDATE ON {{schema}}.slot
    REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT
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

-- reopen_downstream of version 10 without its own events: its updates
-- fire slot_record like any other, which records each propagated re-open
-- with its cause (the message) and the completion it ends. It wakes the
-- downstream workers for almanac's own transactions, as before; in plain
-- SQL the plain-SQL trigger does.
CREATE OR REPLACE FUNCTION {{schema}}.reopen_downstream(up_name text, up_interval text, lo timestamptz, hi timestamptz) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    d record;
    packed record;
    cause text := upstream_cause(up_name, up_interval, lo);
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
        UPDATE slot s SET status = 'AVAILABLE', generation = s.generation + 1, attempts = 0, fail_count = 0,
            data = NULL, completed_at = NULL, completed_by = NULL, not_before = NULL, message = cause, updated_at = clock_timestamp()
        WHERE s.name = d.name AND s."interval" = d."interval" AND s.status IN ('COMPLETE', 'SKIP')
          AND s.slot_start < hi AND s.slot_end > lo;
        IF current_setting('almanac.engine', true) = 'on' THEN
            -- Plain SQL's own trigger wakes the workers otherwise.
            PERFORM pg_notify(wake_channel(), json_build_object('name', d.name, 'interval', d."interval", 'reason', 'upstream')::text);
        END IF;
    END LOOP;
END
$$;

-- slot_stale_finish of version 10 without its own event: slot_record
-- records the stale completion as a re-open carrying the run (its owner,
-- fence and attempt, from the rows and the statement), dated by
-- updated_at, which is set here to the completion's time: the completion
-- columns are cleared with the rest of the generation.
CREATE OR REPLACE FUNCTION {{schema}}.slot_stale_finish() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    IF NEW.status = 'COMPLETE' AND NEW.generation = OLD.generation THEN
        NEW.status := 'AVAILABLE';
        NEW.generation := NEW.generation + 1;
        NEW.attempts := 0;
        NEW.fail_count := 0;
        NEW.data := NULL;
        NEW.updated_at := coalesce(NEW.completed_at, NEW.updated_at);
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
