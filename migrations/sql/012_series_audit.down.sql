-- Back to version 11: Pause and Resume write their own events again, which
-- needs INSERT on series_event. Which roles held it is not recorded; it is
-- given back to every role but the owner that may update the series rows
-- (UPDATE on series), the roles that could pause and resume under version
-- 11: with migrations.Grants' roles, the runtime role, as before.
DROP TRIGGER series_record ON {{schema}}.series;
DROP FUNCTION {{schema}}.series_record();

CREATE FUNCTION {{schema}}.restore_inserts() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS role
        FROM pg_class c
        CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE c.oid = 'series'::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'UPDATE'
    LOOP
        EXECUTE format('GRANT INSERT ON series_event TO %s', g.role);
    END LOOP;
END
$$;
SELECT {{schema}}.restore_inserts();
DROP FUNCTION {{schema}}.restore_inserts();
