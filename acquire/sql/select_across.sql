-- Locks the first acquirable AVAILABLE slot of each of several series for
-- one locked-mode transaction (RunAcross), with a fencing token each, in
-- one statement. The series are listed by arrays with one element each:
-- $1 names, $2 intervals, $3 the queues' lags (microseconds), and [$4, $5)
-- the queues' ranges. Each slot comes with the position of its series in
-- the lists (from 1), its upstream slots (see upstream) and, as with
-- select_locked, the transaction id.
--
-- A series' controls are ctl's (ctlRow, read per series): a paused series
-- gives nothing, the larger lag wins, and a slot of a series with
-- dependencies is due once its upstream series finished its span. A series
-- with a cap gives nothing either, as select_locked's uncapped variant:
-- admissions under a cap take the series' lock and permits, one series at
-- a time (RunBatch does that). Expired leases are left to RunBatch too.
-- Each series' probe reads slot_available_idx from its first entry, as
-- the poll's scan does (wake.Ready), and skips rows other workers hold.
--
-- The last column tells these slots (false) from a row per series that
-- may have work only RunBatch takes (true, its other columns
-- placeholders): not paused, and with a cap or a lease expired (for any
-- grace: RunBatch applies the queue's). A series given nothing without
-- such a row has nothing a claim of its own would take now, short of a
-- slot another transaction holds.
SELECT k.i, a.slot_start, a.slot_end, a.attempts, a.fail_count, a.data, a.message, false, nextval('{{.schema}}.fence_seq'),
    a.generation,
    {{template "upstream" set . "name" "k.name" "interval" "k.\"interval\"" "slot" "a" "deps" "ctl.deps"}},
    a.fence, {{currentXact}}, false
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::timestamptz[]) WITH ORDINALITY
    AS k(name, "interval", lag_us, lo, hi, i)
CROSS JOIN LATERAL ({{template "ctlRow" set . "name" "k.name" "interval" "k.\"interval\"" "lag" "k.lag_us"}}) AS ctl
CROSS JOIN LATERAL (
    SELECT slot_start, slot_end, attempts, fail_count, data, message, generation, fence
    FROM {{.schema}}.slot
    WHERE name = k.name AND "interval" = k."interval" AND status = 'AVAILABLE'
      AND {{notWaiting}}
      AND slot_start >= k.lo AND slot_start < k.hi
      AND slot_start < clock_timestamp() - ctl.lag
      AND slot_end <= clock_timestamp() - ctl.lag
      AND NOT ctl.paused AND ctl.cap IS NULL
      AND (NOT ctl.deps OR {{template "upstreamDone" set . "name" "k.name" "interval" "k.\"interval\""}})
    ORDER BY slot_start {{.order}}
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
) AS a
UNION ALL
SELECT k.i, 'epoch', 'epoch', 0, 0, NULL, NULL, false, 0, 0, NULL, 0, {{currentXact}}, true
FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS k(name, "interval", lag_us, i)
CROSS JOIN LATERAL ({{template "ctlRow" set . "name" "k.name" "interval" "k.\"interval\"" "lag" "k.lag_us"}}) AS ctl
WHERE NOT ctl.paused
  AND (ctl.cap IS NOT NULL OR EXISTS (SELECT FROM {{.schema}}.slot AS e
      WHERE e.name = k.name AND e."interval" = k."interval" AND e.status = 'ACQUIRED' AND e.lease_until < now()))
ORDER BY 1
