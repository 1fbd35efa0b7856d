-- Back to version 7. The privileges version 8 took back are not given
-- again (which roles had them is not recorded): a runtime role of version
-- 7 needs DELETE on slot_event to prune history; re-run the grants of that
-- version (almanac migrate grants) to give it back.
DROP FUNCTION IF EXISTS {{schema}}.prune_history(integer);
DROP TRIGGER slot_sql_update ON {{schema}}.slot;
CREATE TRIGGER slot_sql_update BEFORE UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (NEW.status = 'AVAILABLE' AND (OLD.status <> 'AVAILABLE' OR NEW.not_before IS DISTINCT FROM OLD.not_before)
        AND current_setting('almanac.engine', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.slot_sql_update();
