-- Placeholder for version 10 (see the up file).
SELECT 1;
