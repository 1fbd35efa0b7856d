-- Gives back the slots this owner ($3) holds with none of the fences $4:
-- leases nobody works on (see Queue.releaseOrphans).
UPDATE {{.schema}}.slot SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, updated_at = clock_timestamp()
WHERE name = $1 AND "interval" = $2 AND status = 'ACQUIRED' AND owner = $3 AND NOT fence <@ {{fencesIn "$4"}}
