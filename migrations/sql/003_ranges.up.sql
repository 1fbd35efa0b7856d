-- almanac schema, version 3: ranges of slots known without reading their
-- rows, so that status and gap reports cost O(gaps + open slots) instead of
-- O(slots), and compaction of old finished slots (bounded history).

-- Ranges [range_start, range_end) of a series in which every slot of the
-- grid (every slot that starts in the range) has a row, whatever its state.
-- Gap searches skip them. Materializing records them; deleting slot rows, by
-- almanac or by plain SQL, cuts them (the slot_deleted trigger below), so a
-- range is never claimed stored while one of its rows is gone. A slot
-- inserted by other means is simply not known here: it is found by reading
-- the rows, as before. Written only when slots are materialized or deleted,
-- never when a slot is claimed or completed.
CREATE TABLE {{schema}}.slot_stored (
    name        text        NOT NULL,
    "interval"  text        NOT NULL,
    range_start timestamptz NOT NULL,
    range_end   timestamptz NOT NULL,
    PRIMARY KEY (name, "interval", range_start),
    CONSTRAINT slot_stored_bounds_check CHECK (range_end > range_start)
);

-- Finished slots compacted away: every slot of the grid starting in
-- [range_start, range_end) was COMPLETE (or every one SKIP, as status says)
-- when its row was deleted to bound the slot table's size. Gap detection,
-- status and materializing treat these slots as existing and finished; a
-- re-open of any of them inserts their rows again (as a new generation) and
-- cuts the range. Adjacent ranges of one state are merged, so a series
-- compacted regularly keeps about one row here.
CREATE TABLE {{schema}}.slot_compacted (
    name         text        NOT NULL,
    "interval"   text        NOT NULL,
    range_start  timestamptz NOT NULL,
    range_end    timestamptz NOT NULL,
    status       text        NOT NULL,
    -- The highest generation among the slots compacted: a slot brought back
    -- starts at the next one, so "once per computation" keys stay unique.
    generation   bigint      NOT NULL,
    -- The latest completion time among them, NULL for SKIP.
    completed_at timestamptz,
    compacted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, "interval", range_start),
    CONSTRAINT slot_compacted_bounds_check CHECK (range_end > range_start),
    CONSTRAINT slot_compacted_status_check CHECK (status IN ('COMPLETE', 'SKIP'))
);

-- How many statements have deleted slots of the series. A materializer
-- reads it before it searches for gaps, and records the range it filled as
-- stored only if no deletion happened meanwhile (it re-reads the counter
-- under the row's lock, which the deleting transaction's trigger holds).
ALTER TABLE {{schema}}.series ADD COLUMN slot_deletions bigint NOT NULL DEFAULT 0;

-- Serves status counts: the SKIP slots of a range, counted from the index
-- (COMPLETE ones are what is left once missing, open and skipped slots are
-- subtracted). Partial: slots reach SKIP rarely (a skip, a catch-up), so
-- claims and completions never write to it.
CREATE INDEX slot_skip_idx ON {{schema}}.slot (name, "interval", slot_start)
    WHERE status = 'SKIP';

-- Cuts the stored ranges around the deleted rows, after first bumping the
-- series' deletion counter: the counter's row lock orders this against a
-- materializer recording a stored range (whichever comes second sees the
-- other's work). SECURITY DEFINER: a role allowed to delete slots need not
-- be granted anything on slot_stored or series.
CREATE FUNCTION {{schema}}.slot_deleted() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    UPDATE series s SET slot_deletions = s.slot_deletions + 1
    FROM (SELECT DISTINCT name, "interval" FROM gone) g
    WHERE s.name = g.name AND s."interval" = g."interval";
    -- The pieces are computed from the deleted ranges (not read beside
    -- them), so the delete runs before the insert of pieces with the same
    -- start.
    WITH dropped AS (
        DELETE FROM slot_stored d USING gone g
        WHERE g.name = d.name AND g."interval" = d."interval"
            AND g.slot_start < d.range_end AND g.slot_end > d.range_start
        RETURNING d.name, d."interval", d.range_start, d.range_end
    ),
    cut AS (
        SELECT d.name, d."interval", d.range_start, d.range_end, g.slot_start, g.slot_end
        FROM dropped d JOIN gone g ON g.name = d.name AND g."interval" = d."interval"
            AND g.slot_start < d.range_end AND g.slot_end > d.range_start
    ),
    pieces AS (
        SELECT name, "interval",
            coalesce(max(slot_end) OVER (PARTITION BY name, "interval", range_start ORDER BY slot_start
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), range_start) AS lo,
            slot_start AS hi
        FROM cut
        UNION ALL
        SELECT name, "interval", max(slot_end), range_end FROM cut GROUP BY name, "interval", range_start, range_end
    )
    INSERT INTO slot_stored (name, "interval", range_start, range_end)
    SELECT name, "interval", lo, hi FROM pieces WHERE lo < hi;
    RETURN NULL;
END
$$;

CREATE TRIGGER slot_deleted AFTER DELETE ON {{schema}}.slot
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.slot_deleted();

-- A TRUNCATE, or an UPDATE that moves slots (their key), forgets every
-- stored range: rare, and a later materialize records them again.
CREATE FUNCTION {{schema}}.slot_forget_stored() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, {{schema}}, pg_temp
    AS $$
BEGIN
    UPDATE series SET slot_deletions = slot_deletions + 1;
    DELETE FROM slot_stored;
    RETURN NULL;
END
$$;

CREATE TRIGGER slot_truncated AFTER TRUNCATE ON {{schema}}.slot
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.slot_forget_stored();

CREATE TRIGGER slot_moved AFTER UPDATE OF name, "interval", slot_start ON {{schema}}.slot
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.slot_forget_stored();
