-- Which of the slots $3 (with fences $4) are in status $5 with those
-- fences and no holder: the final writes that committed. The fences are a
-- set (fencesIn): joined with the list, in a nested loop, every row was
-- tested against the whole list (9 s for 16,000 slots in a generic plan).
SELECT s.slot_start FROM {{.schema}}.slot AS s
WHERE s.name = $1 AND s."interval" = $2 AND {{template "listed" .}} AND s.fence <@ {{fencesIn "$4"}} AND s.status = $5 AND s.owner IS NULL
