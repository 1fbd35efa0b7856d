-- almanac schema, version 2: slot generations, the slots' history, and the
-- trigger that lets plain SQL re-open and insert slots like almanac does.

-- A slot's generation grows by one with every re-open: the work of a
-- generation is one computation. "Once per slot" keys use the slot alone,
-- "once per computation" keys add the generation. The first is 1.
ALTER TABLE {{schema}}.slot ADD COLUMN generation bigint NOT NULL DEFAULT 1;

-- Settings of the whole schema, one row.
CREATE TABLE {{schema}}.settings (
    id                boolean  PRIMARY KEY DEFAULT true,
    -- How long slot_event keeps an event; pruning deletes older ones.
    history_retention interval NOT NULL DEFAULT '90 days',
    CONSTRAINT settings_one_row CHECK (id),
    CONSTRAINT settings_history_retention_check CHECK (history_retention > interval '0')
);
INSERT INTO {{schema}}.settings DEFAULT VALUES;

-- The history of every slot, append-only: who held it, what failed, who
-- re-opened it and why, after the slot row has moved on. Workers write one
-- row per outcome in the statement that records the outcome; a claim writes
-- none (its holder is on the slot row) except when it takes a slot from
-- another holder. Materializing writes none: created_at on the slot row says
-- when it was created. Rows older than settings.history_retention are
-- pruned.
CREATE TABLE {{schema}}.slot_event (
    -- When it happened, on the database clock.
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    name       text        NOT NULL,
    "interval" text        NOT NULL,
    slot_start timestamptz NOT NULL,
    event      text        NOT NULL,
    -- The slot's generation after the event.
    generation bigint      NOT NULL,
    -- The run the event ends, when there was one: its holder, fencing token
    -- and attempt number (for taken_over and ejected: the run that lost the
    -- slot).
    owner      uuid,
    fence      bigint,
    attempt    integer,
    -- Who asked, for changes made by a person or a program rather than by a
    -- worker: an operator (user@host), a library caller, or for plain SQL
    -- the session's role and application name.
    actor      text,
    -- The failure, the skip or re-open reason, or what happened.
    message    text,
    CONSTRAINT slot_event_event_check CHECK (event IN ('completed', 'failed', 'parked', 'skipped', 'snoozed',
        'released', 'taken_over', 'ejected', 'reopened', 'retried', 'changed_by_sql')),
    CONSTRAINT slot_event_actor_check CHECK (octet_length(actor) <= 1024),
    CONSTRAINT slot_event_message_check CHECK (octet_length(message) <= 4096)
);

-- Serves the history of one slot: the events of its start, those of other
-- series filtered out and the rest sorted after the fetch. Keyed on the
-- start alone because workers write an event per outcome: measured, this
-- key costs a third of what (name, "interval", slot_start) costs per event.
CREATE INDEX slot_event_slot_idx ON {{schema}}.slot_event (slot_start);

-- Serves pruning: rows are appended in time order, so a block-range index on
-- the time finds the old ones for a fraction of a B-tree's upkeep.
CREATE INDEX slot_event_at_idx ON {{schema}}.slot_event USING brin (at);

-- The channel on which almanac wakes idle workers when slots become
-- acquirable: LISTEN to it to be told too. The name is derived from the
-- schema name by the migrator, since a schema name may be longer than a
-- channel name can be.
CREATE FUNCTION {{schema}}.wake_channel() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT {{wake_channel}}::text$$;

-- Plain SQL is a first-class client: a statement that makes slots AVAILABLE
-- or inserts them wakes idle workers as almanac's own operations do, and an
-- update is recorded in the history. almanac's own statements mark their
-- transactions with the setting almanac.engine = 'on', which the triggers'
-- WHEN clauses test last: they record and notify for themselves.
--
-- An UPDATE that makes a slot AVAILABLE (a re-open, a retry, a lease given
-- back by hand) wakes the series' idle workers when it commits, unless the
-- slot is not acquirable yet (not_before in the future): one notification
-- per transaction and series, as PostgreSQL folds identical notifications of
-- a transaction into one. An UPDATE that makes a COMPLETE or SKIP slot
-- AVAILABLE re-opens it as `almanac reopen` does, for the columns it leaves
-- alone: the generation grows by one, attempts and fail_count restart at 0,
-- the previous computation's data and completed_at are cleared. Each such
-- update is recorded in slot_event ('reopened', or 'changed_by_sql'), with
-- the reason from the message column and as actor the transaction's
-- almanac.actor setting if set, else the session's role and application
-- name. SECURITY DEFINER: a role allowed to update slots need not be
-- granted anything on slot_event.
CREATE FUNCTION {{schema}}.slot_sql_update() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
DECLARE
    kind text := 'changed_by_sql';
BEGIN
    IF OLD.status IN ('COMPLETE', 'SKIP') THEN
        kind := 'reopened';
        IF NEW.generation = OLD.generation THEN NEW.generation := OLD.generation + 1; END IF;
        IF NEW.attempts = OLD.attempts THEN NEW.attempts := 0; END IF;
        IF NEW.fail_count = OLD.fail_count THEN NEW.fail_count := 0; END IF;
        IF NEW.data IS NOT DISTINCT FROM OLD.data THEN NEW.data := NULL; END IF;
        IF NEW.completed_at IS NOT DISTINCT FROM OLD.completed_at THEN NEW.completed_at := NULL; END IF;
    END IF;
    IF NEW.updated_at = OLD.updated_at THEN NEW.updated_at := clock_timestamp(); END IF;
    INSERT INTO slot_event (name, "interval", slot_start, event, generation, owner, fence, actor, message)
    VALUES (NEW.name, NEW."interval", NEW.slot_start, kind, NEW.generation, OLD.owner, OLD.fence,
        left(coalesce(nullif(current_setting('almanac.actor', true), ''),
            session_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')), 256),
        left(NEW.message, 1024));
    IF NEW.not_before IS NULL OR NEW.not_before <= clock_timestamp() THEN
        PERFORM pg_notify(wake_channel(), json_build_object('name', NEW.name, 'interval', NEW."interval", 'reason', 'sql')::text);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER slot_sql_update BEFORE UPDATE ON {{schema}}.slot
    FOR EACH ROW
    WHEN (NEW.status = 'AVAILABLE' AND (OLD.status <> 'AVAILABLE' OR NEW.not_before IS DISTINCT FROM OLD.not_before)
        AND current_setting('almanac.engine', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.slot_sql_update();

-- An INSERT wakes the idle workers of every series of the schema once per
-- statement (the notification names no series): a statement-level trigger
-- costs nothing per row, so materializing a million slots by plain SQL
-- pays nothing for it, and almanac's own inserts pay one setting lookup per
-- statement. Inserts are not recorded: created_at says when a slot was
-- created.
CREATE FUNCTION {{schema}}.slot_sql_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    PERFORM pg_notify(wake_channel(), '{"reason":"sql"}');
    RETURN NULL;
END
$$;

CREATE TRIGGER slot_sql_insert AFTER INSERT ON {{schema}}.slot
    FOR EACH STATEMENT
    WHEN (current_setting('almanac.engine', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.slot_sql_insert();
