-- almanac schema, version 12: the series' history (pauses and resumes) is
-- written only by a trigger that runs as the schema's owner, from the
-- change each series row underwent, as the slots' history is since
-- version 11.
--
-- Before, Pause and Resume wrote their events with plain INSERTs into
-- series_event, so the runtime role kept INSERT there: it could append a
-- pause or a resume that never happened. Now series_record, an AFTER
-- UPDATE statement trigger (SECURITY DEFINER), writes every event from the
-- rows' old and new versions: an event exists only for a change the
-- statement made.
--
-- series_record writes, in one INSERT ... SELECT over the statement's
-- transition tables (o, the rows before, n after, joined on the primary
-- key), in series order:
--   - 'paused' when a series is paused (paused_at set), or paused again
--     by someone else or for another reason (paused_by or paused_reason
--     changed while paused_at stays when it was first paused), with the
--     row's paused_reason;
--   - 'resumed' when a pause ends (paused_at cleared), with the
--     transaction's almanac.reason (the row keeps no reason once resumed;
--     plain SQL: none).
-- The actor is the transaction's almanac.actor, else the role and
-- application name, as for the slots' plain-SQL changes. Those settings
-- can give a misleading actor or resume reason, never an event without its
-- change. Other updates (lag, the cap) and updates that change a series'
-- primary key (its old and new rows do not join) record nothing. Actors
-- and messages are cut to 256 and 1024 characters, which the table's byte
-- bounds always admit.
CREATE FUNCTION {{schema}}.series_record() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    actor text := left(coalesce(nullif(current_setting('almanac.actor', true), ''),
        session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')), 256);
BEGIN
    INSERT INTO series_event (name, "interval", event, actor, message)
    SELECT n.name, n."interval", CASE WHEN n.paused_at IS NULL THEN 'resumed' ELSE 'paused' END, actor,
        left(CASE WHEN n.paused_at IS NULL THEN nullif(current_setting('almanac.reason', true), '') ELSE n.paused_reason END, 1024)
    FROM o JOIN n ON n.name = o.name AND n."interval" = o."interval"
    WHERE (n.paused_at IS NULL) <> (o.paused_at IS NULL)
        OR n.paused_at IS NOT NULL AND (n.paused_by IS DISTINCT FROM o.paused_by OR n.paused_reason IS DISTINCT FROM o.paused_reason)
    ORDER BY n.name, n."interval";
    RETURN NULL;
END
$$;

-- One statement-level trigger: transition tables admit no column list nor
-- WHEN clause, so the function's WHERE picks the changes that have events.
CREATE TRIGGER series_record AFTER UPDATE ON {{schema}}.series
    REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.series_record();

-- Take INSERT on series_event back from every role but the owner (default
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
        WHERE c.oid = 'series_event'::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('REVOKE INSERT ON series_event FROM %s', g.role);
    END LOOP;
END
$$;
SELECT {{schema}}.revoke_rewrites();
DROP FUNCTION {{schema}}.revoke_rewrites();
