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

-- max_in_flight: at most this many slots of the series held at once, by
-- every process and mode together (NULL: no cap). A claim that may exceed
-- it first locks the series row, so admissions happen one at a time, and
-- counts the slots held: ACQUIRED rows, and the permits that locked-mode
-- transactions hold, since their slots' row locks are visible to no
-- count.
ALTER TABLE {{schema}}.series ADD COLUMN max_in_flight integer,
    ADD CONSTRAINT series_max_in_flight_check CHECK (max_in_flight IS NULL OR max_in_flight > 0);

-- A permit is a row, numbered k from 1 to the cap, that a locked-mode
-- transaction locks (FOR UPDATE) for each slot it holds: the lock ends with
-- the transaction however it ends, and taking one needs a privilege on
-- this table, so no other role can hold a series' permits. Rows above the
-- cap are left in place (deleting a locked one would wait for its holder)
-- and ignored.
CREATE TABLE {{schema}}.series_permit (
    name       text    NOT NULL,
    "interval" text    NOT NULL,
    k          integer NOT NULL CHECK (k > 0),
    PRIMARY KEY (name, "interval", k),
    FOREIGN KEY (name, "interval") REFERENCES {{schema}}.series (name, "interval") ON DELETE CASCADE
);

-- Setting a cap, by almanac or by plain SQL, adds the permits it needs.
CREATE FUNCTION {{schema}}.series_permits() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    INSERT INTO series_permit (name, "interval", k)
    SELECT NEW.name, NEW."interval", g FROM generate_series(1, NEW.max_in_flight) AS g
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER series_permits AFTER INSERT OR UPDATE OF max_in_flight ON {{schema}}.series
    FOR EACH ROW WHEN (NEW.max_in_flight IS NOT NULL)
    EXECUTE FUNCTION {{schema}}.series_permits();

-- Dependencies between series: a slot of the downstream series (name,
-- "interval") is due only when every slot of each upstream series (up_name,
-- up_interval) that overlaps it is COMPLETE or SKIP, compacted ones
-- included; a part of the range without an upstream row is not done. The
-- grids may differ in interval and zone: overlap is by time. Cycles are
-- refused by almanac when a dependency is added (under an advisory lock).
CREATE TABLE {{schema}}.series_dependency (
    name        text NOT NULL,
    "interval"  text NOT NULL,
    up_name     text NOT NULL,
    up_interval text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, "interval", up_name, up_interval),
    FOREIGN KEY (name, "interval") REFERENCES {{schema}}.series (name, "interval") ON DELETE CASCADE,
    FOREIGN KEY (up_name, up_interval) REFERENCES {{schema}}.series (name, "interval") ON DELETE CASCADE,
    CONSTRAINT series_dependency_self_check CHECK ((name, "interval") <> (up_name, up_interval))
);
CREATE INDEX series_dependency_up_idx ON {{schema}}.series_dependency (up_name, up_interval);

-- upstream_done says whether the upstream series (up_name, up_interval)
-- has finished all of [lo, hi): the overlaps of its COMPLETE and SKIP rows
-- and of its compacted ranges add up to the whole span. Slots of one grid
-- never overlap, so the sum is the length covered.
CREATE FUNCTION {{schema}}.upstream_done(up_name text, up_interval text, lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
SELECT coalesce((SELECT sum(least(u.slot_end, hi) - greatest(u.slot_start, lo)) FROM slot u
        WHERE u.name = up_name AND u."interval" = up_interval AND u.status IN ('COMPLETE', 'SKIP')
          AND u.slot_start < hi AND u.slot_start > lo - 2 * up_interval::interval - interval '1 day'
          AND u.slot_end > lo), interval '0')
    + coalesce((SELECT sum(least(c.range_end, hi) - greatest(c.range_start, lo)) FROM slot_compacted c
        WHERE c.name = up_name AND c."interval" = up_interval AND c.range_start < hi AND c.range_end > lo), interval '0')
    >= hi - lo
$$;

-- Re-opening upstream slots re-opens the overlapping finished slots of
-- every downstream series as a new generation, in the same transaction
-- and by every path (almanac's operations, plain SQL, the page): the
-- update below fires this trigger again for the downstream series, so the
-- re-open travels down the whole graph (which has no cycles). The cause
-- is the message and, where the plain-SQL trigger records nothing
-- (almanac.engine on, honoured for a role that may insert history, as in
-- migration 8), a 'reopened' event.
CREATE FUNCTION {{schema}}.slot_reopen_downstream() RETURNS trigger
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

CREATE TRIGGER slot_reopen_downstream AFTER UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (OLD.status IN ('COMPLETE', 'SKIP') AND NEW.status = 'AVAILABLE')
    EXECUTE FUNCTION {{schema}}.slot_reopen_downstream();

-- The runtime role of migrations.Grants gets these tables through default
-- privileges; take back what would let it rewrite the record or forge
-- permits, as migrations.Grants does for a schema created afterwards:
-- series_event is append-only, series_permit rows are read and locked
-- only (the trigger above creates them), series_dependency rows are added,
-- removed and the table locked, never updated.
CREATE FUNCTION {{schema}}.revoke_rewrites() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT c.oid::regclass AS tbl, a.privilege_type AS priv,
            CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS role
        FROM pg_class c
        CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE a.grantee <> c.relowner
          AND ((c.oid = 'series_event'::regclass AND a.privilege_type IN ('UPDATE', 'DELETE', 'TRUNCATE'))
            OR (c.oid = 'series_permit'::regclass AND a.privilege_type IN ('INSERT', 'DELETE', 'TRUNCATE'))
            OR (c.oid = 'series_dependency'::regclass AND a.privilege_type IN ('UPDATE', 'TRUNCATE')))
    LOOP
        EXECUTE format('REVOKE %s ON %s FROM %s', g.priv, g.tbl, g.role);
    END LOOP;
END
$$;
SELECT {{schema}}.revoke_rewrites();
DROP FUNCTION {{schema}}.revoke_rewrites();
