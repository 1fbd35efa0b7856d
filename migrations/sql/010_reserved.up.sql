-- Placeholder for version 10, which another branch (reopen-inflight)
-- brings; it lets version 11 load on its own. Replaced by that migration
-- when the branches merge.
SELECT 1;
