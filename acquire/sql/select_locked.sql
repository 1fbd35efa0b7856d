-- Locks up to $3 acquirable slots of [$4, $5) for a locked-mode
-- transaction, with a fencing token each. $6 is the lag (microseconds),
-- $7 the takeover grace (microseconds), [$8, $9) the part of the range
-- searched for AVAILABLE slots. The transaction id comes with the slots
-- (locking rows gave the transaction one already): if the connection is
-- lost during COMMIT, it tells whether the outcomes committed. Each slot
-- comes with its upstream slots (see upstream), read in the snapshot that
-- judged it due.
WITH {{template "candidates" set . "lag" "$6" "grace" "$7" "lo" "$8" "hi" "$9"}}
SELECT slot_start, slot_end, attempts, fail_count, data, message, took_over, nextval('{{.schema}}.fence_seq'), generation,
    {{if .upstream}}{{template "upstream" set . "name" "$1" "interval" "$2" "slot" "picked" "deps" "(SELECT deps FROM ctl)"}}{{else}}NULL::jsonb{{end}}, held_fence, {{currentXact}}
FROM picked ORDER BY slot_start {{.order}}
