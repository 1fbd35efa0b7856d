-- Claims up to $3 slots of [$4, $5) in lease mode: each gets owner $6, a
-- new fencing token, and a lease of $7 microseconds. $8 is the lag and $9
-- the takeover grace (microseconds), [$10, $11) the part of the range
-- searched for AVAILABLE slots. A claim records no event (the slot row
-- shows its holder), except for an expired lease it takes over: the run
-- that lost it, which the slot table's trigger records (slot_record,
-- migration 11). The update takes the rows just locked by their addresses
-- (see lockedRows), and returns the addresses of the versions it wrote
-- (see complete_tx). Each slot comes with its upstream slots (see upstream),
-- read in the snapshot that judged it due.
WITH {{template "candidates" set . "lag" "$8" "grace" "$9" "lo" "$10" "hi" "$11"}},
claimed AS (
UPDATE {{.schema}}.slot AS s SET
    status = 'ACQUIRED', owner = $6, fence = nextval('{{.schema}}.fence_seq'),
    lease_until = clock_timestamp() + $7 * interval '1 microsecond',
    attempts = s.attempts + 1, updated_at = clock_timestamp()
FROM picked
WHERE {{lockedRows "picked"}}
RETURNING s.slot_start, s.slot_end, s.attempts, s.fail_count, s.data, s.message, picked.took_over, s.fence, s.generation, s.lease_until,
    s.ctid
)
SELECT slot_start, slot_end, attempts, fail_count, data, message, took_over, fence, generation,
    {{if .upstream}}{{template "upstream" set . "name" "$1" "interval" "$2" "slot" "claimed" "deps" "(SELECT deps FROM ctl)"}}{{else}}NULL::jsonb{{end}}, lease_until, ctid FROM claimed
