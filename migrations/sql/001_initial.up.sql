-- almanac schema, version 1: series, slots and the fencing-token sequence.
-- The migrator substitutes the quoted schema name for the placeholder, and
-- creates the schema before this runs when it does not exist.

-- Fencing tokens. nextval is never rolled back, so a token handed to a holder
-- that crashed is never handed out again: a later holder always has a larger one.
CREATE SEQUENCE {{schema}}.fence_seq AS bigint;

-- A series is a name plus an interval, and the grid its slots lie on.
-- interval holds the canonical ISO-8601 text (PT5M, P1D, P1M): PostgreSQL's
-- interval type must never be the key, because '1 month' = '30 days' there.
CREATE TABLE {{schema}}.series (
    name         text        NOT NULL,
    "interval"   text        NOT NULL,
    time_zone    text        NOT NULL DEFAULT 'UTC',
    origin       timestamptz NOT NULL,
    -- After how many failures since its last success or re-open a slot of
    -- this series is parked (NULL: never, unless a worker sets its own
    -- limit). Workers read it when they start. Lag and catch-up policy are
    -- properties of a job (the program that runs the series), not stored.
    max_attempts integer,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, "interval"),
    CONSTRAINT series_name_check CHECK (name <> '' AND octet_length(name) <= 200),
    CONSTRAINT series_max_attempts_check CHECK (max_attempts IS NULL OR max_attempts > 0)
);

-- One row per slot. There is deliberately no foreign key to series: the
-- referential check would cost a lookup and a KEY SHARE lock per inserted row
-- when a million slots are materialized; the library checks the series exists
-- before it writes slots.
CREATE TABLE {{schema}}.slot (
    name         text        NOT NULL,
    "interval"   text        NOT NULL,
    slot_start   timestamptz NOT NULL,
    slot_end     timestamptz NOT NULL,
    status       text        NOT NULL DEFAULT 'AVAILABLE',
    fence        bigint      NOT NULL DEFAULT 0,
    attempts     integer     NOT NULL DEFAULT 0,
    fail_count   integer     NOT NULL DEFAULT 0,
    message      text,
    owner        uuid,
    lease_until  timestamptz,
    not_before   timestamptz,
    data         jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    -- Serves gap detection and range counts: an index-only scan of the starts
    -- of one series in a range (a vacuumed table answers from the index alone).
    PRIMARY KEY (name, "interval", slot_start),
    CONSTRAINT slot_status_check CHECK (status IN ('AVAILABLE', 'ACQUIRED', 'COMPLETE', 'SKIP')),
    CONSTRAINT slot_bounds_check CHECK (slot_end > slot_start),
    -- A lease belongs to ACQUIRED rows only; in locked mode ACQUIRED is the row
    -- lock itself and nothing is written until the end.
    CONSTRAINT slot_lease_check CHECK (status = 'ACQUIRED' OR (owner IS NULL AND lease_until IS NULL))
);

-- Serves acquisition: the acquirable slots of one series in slot order, so a
-- worker's "first AVAILABLE slot" is the first entry of this index (oldest
-- first, or newest first by scanning it backwards). Partial, so completed
-- history never slows acquisition down.
CREATE INDEX slot_available_idx ON {{schema}}.slot (name, "interval", slot_start)
    WHERE status = 'AVAILABLE';

-- Serves lease-expiry scans (takeover of expired leases) and "in flight"
-- reports: the held slots of one series by lease deadline.
CREATE INDEX slot_acquired_idx ON {{schema}}.slot (name, "interval", lease_until)
    WHERE status = 'ACQUIRED';
