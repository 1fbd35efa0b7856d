-- Back to version 7. The privileges version 8 took back are not given
-- again (which roles had them is not recorded): a runtime role of version
-- 7 needs DELETE on slot_event to prune history; re-run the grants of that
-- version (almanac migrate grants) to give it back.
DROP FUNCTION IF EXISTS {{schema}}.prune_history(integer);
