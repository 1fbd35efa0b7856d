-- Fragments the statements share. Every statement is scoped to one series
-- ($1 name, $2 interval) and relies on the database clock only.

{{define "candidates"}}
-- candidates selects up to $3 acquirable slots of the series in [$4, $5)
-- and locks them, skipping rows other workers hold: first ACQUIRED slots
-- whose lease expired (their holder is presumed dead, and they have waited
-- longest), then AVAILABLE slots that are due and not in backoff, in slot
-- order, from the part [.lo, .hi) of the range (see floor). A slot is due
-- once slot_end + lag has passed on the database clock, whatever the
-- worker's clock says; .lag is the parameter holding the job's lag in
-- microseconds, and the series' stored lag, when larger, wins (ctl). An expired lease is taken over once it has been expired for
-- .grace microseconds (Policy.TakeoverGrace), and the server up for as
-- long: the database clock runs on while the server is down, and its
-- holder, cut off meanwhile, may be waiting to record the outcome of work
-- it finished. Counted from the expiry alone, an outage longer than the
-- lease and the grace handed every such slot to the first claim after it,
-- and the work ran again (TestOutageLeavesLeasesToTheirHolders).
--
-- Expired leases are found through slot_acquired_idx, by expiry alone, so
-- that a claim reads the expired leases, not every lease held, let alone
-- every slot of the range. Two choices make that the plan:
--   - expiry is judged against now(), the start of the statement's
--     transaction, not clock_timestamp(): only a stable value can bound
--     the index scan. now() is earlier than the clock by the time since
--     BEGIN (a round trip in locked mode), so a takeover can only come
--     that much later, never earlier;
--   - the range is tested by containment, which no index of the table
--     serves: with slot_start >= $4 AND slot_start < $5 a generic plan
--     (a long-lived connection's, after five executions) guessed the range
--     narrow and scanned it whole through the primary key, once per claim.
-- Measured: TestLeaseStatementsReadOnlyTheirSlots read the whole
-- 20,000-slot series per claim before.
--
-- AVAILABLE slots are read in slot order written as slot_start NULLS FIRST
-- (NULLS LAST newest first). slot_start is never NULL, so it is the same
-- order, but one only slot_available_idx keeps (migration 5): the primary
-- key would have to sort every open slot to give it. Ordered plainly, the
-- primary key served it too, and when the statistics said most of the
-- series was AVAILABLE and the partial index was the larger, the planner
-- read the primary key with a status filter: through every finished slot
-- before the first acquirable one, once per claim
-- (TestClaimsSkipFinishedSlots).
--
-- The tests of a waiting slot (notWaiting) and of an expired lease
-- (expired) are wake.NotWaiting and wake.Expired, which the scan for series
-- with work (wake.Ready) uses too: a series it names has a slot to claim.
--
-- The status test sits in the statement that locks the row, so a slot
-- completed meanwhile is never acquired again: under READ COMMITTED the
-- locked row is re-checked against the WHERE clause. The second LIMIT
-- subtracts what the first found, so no extra row is locked: in locked mode
-- a locked row stays locked for the whole job.
-- ctl reads the series' controls from its row, once per statement: the
-- lag, the larger of the job's (.lag) and the series' stored one (NULL,
-- none stored, leaves the job's: greatest ignores NULLs), and whether the
-- series is paused, in which case nothing is claimed, expired leases
-- included (held slots finish; their holders' writes need no claim), its
-- cap (see capFree), and whether it depends on upstream series: a slot of
-- such a series is due only once every upstream series finished its span
-- (upstream_done, migration 9). Each is read once per claim and tested
-- once (a one-time filter), not per slot: a series without dependencies
-- pays one index probe per claim for them.
--
-- The per-slot test of the upstream series is in the statement only with
-- .upstream, the variant for a series the queue last read with upstream
-- series (see controls). The planner counts an index probe per row for it
-- whether it runs or not, which over a range of many slots multiplied the
-- statement's estimated cost past jit_above_cost: a plan made for the
-- claim's parameters (every claim without named prepared statements, and
-- the first five of a prepared one) was then compiled to machine code,
-- which took many times longer than the claim itself
-- (TestPlainClaimIsNotCompiled). Without .upstream the statement takes no
-- AVAILABLE slot of a series that has upstream series, so a dependency
-- added after the queue's last read holds claims back until the next
-- read, and never lets one through.
ctl AS MATERIALIZED (
{{template "ctlRow" set . "name" "$1" "interval" "$2"}}
),
{{- if .permitsInline}}
{{template "freePermits" .}}
{{- end}}
expired AS (
    SELECT ctid, slot_start, slot_end, attempts, fail_count, data, message, true AS took_over, fence AS held_fence,
        generation
    FROM {{.schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND status = 'ACQUIRED'
      AND {{expired .grace}}
      AND tstzrange($4, $5) @> slot_start
      AND NOT (SELECT paused FROM ctl)
    ORDER BY lease_until
    LIMIT $3
    FOR NO KEY UPDATE SKIP LOCKED
),
available AS (
    SELECT ctid, slot_start, slot_end, attempts, fail_count, data, message, false AS took_over, fence AS held_fence,
        generation
    FROM {{.schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND status = 'AVAILABLE'
      AND {{notWaiting}}
      AND slot_start >= {{.lo}} AND slot_start < {{.hi}}
      AND slot_start < clock_timestamp() - (SELECT lag FROM ctl)
      AND slot_end <= clock_timestamp() - (SELECT lag FROM ctl)
      AND NOT (SELECT paused FROM ctl)
{{- if .upstream}}
      AND (NOT (SELECT deps FROM ctl) OR {{template "upstreamDone" set . "name" "$1" "interval" "$2"}})
{{- else}}
      AND NOT (SELECT deps FROM ctl)
{{- end}}
{{- if .capped}}
    ORDER BY slot_start {{.order}}
    LIMIT least($3 - (SELECT count(*) FROM expired), coalesce({{template "capFree" .}}, $3))
{{- else}}
      AND (SELECT cap FROM ctl) IS NULL
    ORDER BY slot_start {{.order}}
    LIMIT $3 - (SELECT count(*) FROM expired)
{{- end}}
    FOR NO KEY UPDATE SKIP LOCKED
),
picked AS (
    SELECT * FROM expired UNION ALL SELECT * FROM available
)
{{- end}}

{{define "ctlRow"}}
-- ctlRow is ctl's one row for the series .name, .interval (expressions:
-- the parameters, or a column of the series listed by select_across).
    SELECT coalesce(max(greatest({{.lag}} * interval '1 microsecond', c.lag)), {{.lag}} * interval '1 microsecond') AS lag,
        coalesce(bool_or(c.paused_at IS NOT NULL), false) AS paused, max(c.max_in_flight) AS cap,
        EXISTS (SELECT FROM {{.schema}}.series_dependency AS d WHERE d.name = {{.name}} AND d."interval" = {{.interval}}) AS deps
    FROM {{.schema}}.series AS c
    WHERE c.name = {{.name}} AND c."interval" = {{.interval}}
{{- end}}

{{define "upstreamDone"}}
-- upstreamDone is whether every upstream series of .name, .interval
-- finished the span of the slot row being tested (slot_start, slot_end).
NOT EXISTS (SELECT FROM {{.schema}}.series_dependency AS d
          WHERE d.name = {{.name}} AND d."interval" = {{.interval}} AND NOT {{.schema}}.upstream_done(d.up_name, d.up_interval, slot_start, slot_end))
{{- end}}

{{define "capFree"}}
-- capFree is how many more slots the series' cap (max_in_flight) admits:
-- the cap less the slots held, which are the ACQUIRED rows (leases,
-- expired ones included, and locked-mode takeovers of them) and the
-- permits locked-mode transactions hold. NULL without a cap. Only a
-- statement that runs after the series row was locked (lock_series) may
-- use it: the lock orders admissions, and this statement's snapshot,
-- taken after the lock was granted, sees every admission before it.
greatest(0, (SELECT cap FROM ctl)
    - (SELECT count(*) FROM {{.schema}}.slot WHERE name = $1 AND "interval" = $2 AND status = 'ACQUIRED')
    - {{if .permitsInline}}((SELECT count(*) FROM {{.schema}}.series_permit
          WHERE name = $1 AND "interval" = $2 AND k <= (SELECT cap FROM ctl))
        - (SELECT count(*) FROM free_permits)){{else}}$10::bigint{{end}})
{{- end}}

{{define "freePermits"}}
-- free_permits locks the series' permits no locked-mode transaction holds
-- (a permit is a row of series_permit, held by a row lock for as long as
-- the transaction that took it lasts), so that the held ones are the rest.
-- A lease claim holds these locks only until it commits, a moment later.
free_permits AS (
    SELECT 1 FROM {{.schema}}.series_permit
    WHERE name = $1 AND "interval" = $2 AND k <= (SELECT cap FROM ctl)
    FOR UPDATE SKIP LOCKED
),
{{- end}}

{{define "completed"}}
-- completed is what a completion of the lease of owner $4 writes (to row
-- s); see stale.
status = 'COMPLETE', owner = NULL, lease_until = NULL, not_before = NULL, fail_count = 0,
    message = NULL, completed_at = clock_timestamp(), completed_by = $4, updated_at = clock_timestamp(),
    {{template "stale" (set . "status" "'COMPLETE'" "fence" "s.fence" "since" "NULL")}}
{{- end}}

{{define "stale"}}
-- stale is the mark (reopen_cause) a write of outcome .status leaves on
-- row s, whose run took fence .fence and, in locked mode, began at
-- .since: a completion of a slot of a series with dependencies whose
-- upstream slots changed since the run began (stale_cause, migration 10)
-- is marked, and the mark makes it AVAILABLE as its next generation
-- instead (slot_stale_finish); other writes keep the mark an upstream
-- re-open set. A series without dependencies pays one index probe per
-- statement.
reopen_cause = CASE WHEN {{.status}} = 'COMPLETE' AND s.reopen_cause IS NULL
        AND (SELECT EXISTS (SELECT FROM {{.schema}}.series_dependency AS d WHERE d.name = $1 AND d."interval" = $2))
    THEN {{.schema}}.stale_cause($1, $2, s.slot_start, s.slot_end, {{.fence}}, {{.since}}) ELSE s.reopen_cause END
{{- end}}

{{define "guard"}}
-- guard is the fencing condition of every lease write: the slot is still
-- ours ($4 the owner), with the token we were given ($5), $3 its start.
name = $1 AND "interval" = $2 AND slot_start = $3 AND status = 'ACQUIRED' AND owner = $4 AND fence = $5
{{- end}}

{{define "listed"}}
-- listed is the condition each statement given a list of slots ($3) adds to
-- its join with that list, so that the primary key finds exactly those
-- rows. Without it the planner may hash-join the list with every row of the
-- series that passes the other tests: measured, the generic plan of
-- CompleteMany read every lease held, by every worker, through
-- slot_acquired_idx, and the dead entries of leases completed since the
-- last vacuum. The list's first and last starts bound it too: a planner
-- that believes the series holds one row (no statistics for it yet: a
-- series loaded or added since the last ANALYZE) keeps the list out of the
-- index condition, a descent per element for nothing as it sees it, and so
-- read the whole series for each statement (80 ms for a completion of 100
-- leases in a 500,000-slot series, 2 ms once analyzed); a range costs it
-- nothing, so it always bounds the scan to the list's span
-- (TestLeaseListsScaleWithLeases). In a generic plan that planner then
-- tests each row of the span against the list, a pass over the list per
-- row: the one superlinear cost left, which the statistics remove (a
-- heartbeat of 16,000 leases takes 0.40 s without them, 0.18 s with).
s.slot_start = ANY($3::timestamptz[])
  AND s.slot_start >= (SELECT min(l) FROM unnest($3::timestamptz[]) AS l)
  AND s.slot_start <= (SELECT max(l) FROM unnest($3::timestamptz[]) AS l)
{{- end}}

{{define "held"}}
-- held is the guard of the lease writes given a list of slots ($3) with
-- their fences ($5): the slots still held by this owner ($4) with those
-- fences. It is written so that the primary key is the only way to the
-- rows:
--   - the owner test stands for the status test, since slot_lease_check
--     allows an owner on ACQUIRED rows only. A status test lets the planner
--     read every lease of the series through slot_acquired_idx, which looks
--     nearly empty to statistics taken while few leases were held (the
--     usual case: leases come and go faster than the statistics are
--     renewed);
--   - the fences are tested as a set (fencesIn), which names the leases as
--     well as pairing each slot with its fence would. Looking each row's
--     fence up in the list by position (array_position) cost a pass over
--     the list per row: 0.7 s for a completion of 16,000 leases and 1.3 s
--     for their heartbeat (TestLeaseListsScaleWithLeases).
-- Measured (TestLeaseStatementsReadOnlyTheirSlots, statistics taken before
-- 1,000 leases were claimed): a heartbeat of 10 leases read 11,075 rows,
-- now 10; and with eight workers claiming and completing, a completion of
-- 100 leases took 6.7 ms reading 500 leases, now 0.3 ms reading its own.
s.name = $1 AND s."interval" = $2 AND {{template "listed" .}}
  AND s.owner = $4 AND s.fence <@ {{fencesIn "$5"}}
{{- end}}

{{define "runOwner"}}
-- runOwner names the owner of the run whose outcomes the statement writes
-- (the parameter given) for the rest of the transaction, for the slot
-- table's trigger (slot_record), which records those outcomes when the
-- statement ends: a locked-mode run's owner is on no row. Only the last
-- statement of a transaction of almanac's own uses it, so nothing else is
-- attributed to that run.
set_config('almanac.owner', {{.}}::text, true)
{{- end}}

{{define "upstream"}}
-- upstream is, for a slot of the relation .slot (with slot_start and
-- slot_end) of the series .name, .interval with dependencies (.deps
-- true), the rows of each upstream series that overlap it, with their
-- generations: a JSON array of one object per upstream series (n name, i interval, z zone, o
-- origin, s its slots as {s start, e end, g generation} in slot order),
-- NULL without dependencies. The claim passes its ctl's test, so a series
-- without dependencies pays nothing per slot; a claim without .upstream
-- (see ctl) leaves it out, since it takes no slot of such a series, and
-- the planner would count its subquery once per row of the range. Compacted upstream slots
-- have no row and are not listed. The lower bound on slot_start is
-- upstream_done's (migration 9): it lets the primary key bound the scan.
CASE WHEN {{.deps}} THEN (
    SELECT jsonb_agg(jsonb_build_object('n', d.up_name, 'i', d.up_interval, 'z', u.time_zone, 'o', u.origin,
        's', (SELECT coalesce(jsonb_agg(jsonb_build_object('s', x.slot_start, 'e', x.slot_end, 'g', x.generation)
                ORDER BY x.slot_start), '[]')
            FROM {{.schema}}.slot AS x
            WHERE x.name = d.up_name AND x."interval" = d.up_interval
              AND x.slot_start < {{.slot}}.slot_end AND x.slot_end > {{.slot}}.slot_start
              AND x.slot_start > {{.slot}}.slot_start - 2 * d.up_interval::interval - interval '1 day'))
        ORDER BY d.up_name, d.up_interval)
    FROM {{.schema}}.series_dependency AS d
    JOIN {{.schema}}.series AS u ON u.name = d.up_name AND u."interval" = d.up_interval
    WHERE d.name = {{.name}} AND d."interval" = {{.interval}})
END
{{- end}}
