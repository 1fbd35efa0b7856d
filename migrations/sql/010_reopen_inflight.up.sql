-- almanac schema, version 10: a downstream slot in flight when an upstream
-- slot it depends on is re-opened does not end COMPLETE for its stale
-- input; it ends AVAILABLE as its next generation, and history says which
-- upstream slot caused it. A re-open that would reach downstream slots
-- that exist only in a compacted range is refused instead of missing them.

-- reopen_cause: set while the slot's current generation is known to have
-- run on stale input (the cause, naming the upstream slot). A completion
-- of such a generation leaves the slot AVAILABLE as the next generation
-- (slot_stale_finish below); failures, snoozes, releases and takeovers
-- keep it, so no path loses it; a re-open (a new generation) clears it.
ALTER TABLE {{schema}}.slot ADD COLUMN reopen_cause text,
    ADD CONSTRAINT slot_reopen_cause_check CHECK (octet_length(reopen_cause) <= 4096);

-- The cause of a propagated re-open: the upstream slot that started it.
CREATE FUNCTION {{schema}}.upstream_cause(up_name text, up_interval text, up_start timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
SELECT left(format('upstream %s %s/%s re-opened', up_name, to_char(up_start AT TIME ZONE 'UTC',
    'YYYY-MM-DD"T"HH24:MI:SS"Z"'), up_interval), 1024)
$$;

-- reopen_downstream re-opens what depends on [lo, hi) of the upstream
-- series (up_name, up_interval), one level down (its own updates fire
-- slot_reopen_downstream for the next): the overlapping COMPLETE and SKIP
-- slots of each downstream series become AVAILABLE as a new generation,
-- and the overlapping ACQUIRED ones are marked (reopen_cause) so that
-- their run does not end COMPLETE. Rows another transaction has locked
-- are not marked, so a re-open never waits for a job: a locked-mode
-- worker (which holds its rows for the whole job) and a lease completing
-- at this moment both test their upstream slots when they finish
-- (stale_cause), under a lock this transaction's upstream update
-- conflicts with. Compacted downstream slots have no row to re-open: the
-- re-open is refused, naming them, rather than leave them finished
-- (docs/design/dependencies.md).
--
-- In almanac's own transactions (almanac.engine on, honoured for a role
-- that may insert history, as in migration 8) it records the 'reopened'
-- events and wakes the downstream series' workers; in plain SQL the
-- plain-SQL trigger does both.
CREATE FUNCTION {{schema}}.reopen_downstream(up_name text, up_interval text, lo timestamptz, hi timestamptz) RETURNS void
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

-- The trigger of migration 9, now through reopen_downstream.
CREATE OR REPLACE FUNCTION {{schema}}.slot_reopen_downstream() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    PERFORM reopen_downstream(NEW.name, NEW."interval", NEW.slot_start, NEW.slot_end);
    RETURN NULL;
END
$$;

-- stale_cause says whether a run of the downstream slot [lo, hi) of
-- series (dn, di), which took fence run_fence, ran on input that is stale
-- now: some part of the span is no longer done upstream (see
-- upstream_done), or was done again after the run began: by a run with a
-- later fence (fences are taken in time order), or, when since is given
-- (locked mode: the start of the run's transaction), written after it.
-- It returns the cause, naming the first such upstream slot, or NULL.
--
-- It locks the upstream rows and compacted ranges it reads (FOR SHARE)
-- until the caller's transaction ends: an upstream re-open not yet
-- committed is waited for and then seen, and one that comes later waits
-- for this completion to commit, after which its trigger finds the slot
-- COMPLETE and re-opens it. Either way no completion is left standing on
-- stale input. Called only for the slots of series with dependencies.
CREATE FUNCTION {{schema}}.stale_cause(dn text, di text, lo timestamptz, hi timestamptz, run_fence bigint, since timestamptz) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    d record;
    changed timestamptz;
BEGIN
    FOR d IN SELECT sd.up_name, sd.up_interval FROM series_dependency sd
        WHERE sd.name = dn AND sd."interval" = di ORDER BY sd.up_name, sd.up_interval
    LOOP
        -- The bounds are upstream_done's: the rows that may overlap.
        SELECT min(u.slot_start) FILTER (WHERE u.fence > run_fence OR u.updated_at > since OR u.status NOT IN ('COMPLETE', 'SKIP'))
        INTO changed
        FROM (SELECT l.slot_start, l.fence, l.updated_at, l.status FROM slot l
            WHERE l.name = d.up_name AND l."interval" = d.up_interval AND l.slot_start < hi
              AND l.slot_start > lo - 2 * d.up_interval::interval - interval '1 day' AND l.slot_end > lo
            FOR SHARE) u;
        PERFORM FROM slot_compacted c
        WHERE c.name = d.up_name AND c."interval" = d.up_interval AND c.range_start < hi AND c.range_end > lo
        FOR SHARE;
        -- A new statement, so a new snapshot: it sees what the locks
        -- above waited for.
        IF changed IS NOT NULL OR NOT upstream_done(d.up_name, d.up_interval, lo, hi) THEN
            RETURN upstream_cause(d.up_name, d.up_interval, coalesce(changed, lo));
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- A completion of a generation known to be stale (reopen_cause set, by
-- reopen_downstream or by the completing statement from stale_cause)
-- leaves the slot AVAILABLE as its next generation instead, as a re-open
-- would: the run's completion is carried by the 'reopened' event (as in
-- migration 4), whose message is the cause. A skip stands (the handler
-- found nothing to do) and clears the mark, as does any change of
-- generation (a re-open). Named to fire after slot_sql_update, so a plain
-- SQL completion of a marked slot is not also recorded as a change by
-- SQL. SECURITY DEFINER: the event is recorded whoever completes.
CREATE FUNCTION {{schema}}.slot_stale_finish() RETURNS trigger
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

CREATE TRIGGER slot_stale_finish BEFORE UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (NEW.reopen_cause IS NOT NULL AND (NEW.status IN ('COMPLETE', 'SKIP') OR NEW.generation <> OLD.generation))
    EXECUTE FUNCTION {{schema}}.slot_stale_finish();
