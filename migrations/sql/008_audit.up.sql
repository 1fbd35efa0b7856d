-- almanac schema, version 8: the runtime role cannot rewrite the audit
-- trail, the version table or the schema's settings, and a role that may
-- not write history cannot keep its re-opens out of it.
--
-- Before, the grants gave every role that runs workers INSERT, UPDATE and
-- DELETE on every table: it could erase or alter history (slot_event),
-- record a version that was never applied (schema_migrations), or shorten
-- the history's retention (settings) and prune it all. Now only the
-- schema's owner (the migration role) holds those privileges: history is
-- append-only for everyone else, and old events are pruned through
-- prune_history, which deletes only what the owner's retention allows.

-- Deletes up to batch events older than settings.history_retention, by
-- their row addresses; SKIP LOCKED lets several pruners share the work.
-- now() is the start of the caller's transaction on the database clock;
-- being stable, it lets the block-range index on the time find old rows.
-- SECURITY DEFINER: it runs as the owner, the only role that may delete
-- events, and deletes nothing the retention keeps.
CREATE FUNCTION {{schema}}.prune_history(batch integer) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
WITH gone AS (
    DELETE FROM slot_event WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM slot_event
        WHERE at < now() - (SELECT history_retention FROM settings)
        LIMIT batch FOR UPDATE SKIP LOCKED))
    RETURNING 1
)
SELECT count(*) FROM gone
$$;

-- Take back, from every role but the owner, what lets it rewrite these
-- tables (default privileges granted them to the runtime role): history
-- keeps INSERT, which the engine's statements use to record outcomes. The
-- tables are named through the search path, so that no schema name has to
-- be written inside a function's body.
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
        WHERE c.oid IN ('slot_event'::regclass, 'schema_migrations'::regclass, 'settings'::regclass)
          AND a.grantee <> c.relowner
          AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
          AND NOT (c.relname = 'slot_event' AND a.privilege_type = 'INSERT')
    LOOP
        EXECUTE format('REVOKE %s ON %s FROM %s', g.priv, g.tbl, g.role);
    END LOOP;
END
$$;
SELECT {{schema}}.revoke_rewrites();
DROP FUNCTION {{schema}}.revoke_rewrites();

-- The plain-SQL update trigger skipped every transaction that set
-- almanac.engine = 'on', which any role can set: a service allowed only to
-- update slots kept its re-opens out of the history that way. The setting
-- is now honoured only for a role that may insert history itself (the
-- engine's role, which records its own events): for any other, the change
-- is recorded whatever the setting says. The test runs last, and only for
-- rows that become acquirable, so completions never reach it.
DROP TRIGGER slot_sql_update ON {{schema}}.slot;
CREATE TRIGGER slot_sql_update BEFORE UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (NEW.status = 'AVAILABLE' AND (OLD.status <> 'AVAILABLE' OR NEW.not_before IS DISTINCT FROM OLD.not_before)
        AND (current_setting('almanac.engine', true) IS DISTINCT FROM 'on'
            OR NOT has_table_privilege(current_user, {{schema_literal}} || '.slot_event', 'INSERT')))
    EXECUTE FUNCTION {{schema}}.slot_sql_update();
