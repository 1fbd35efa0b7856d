-- Back to version 6: every process's searches go on from where its own left
-- off.
DROP TABLE {{schema}}.slot_frontier;
