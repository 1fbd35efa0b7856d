-- complete in the caller's transaction (CompleteTx), of the version of
-- the row at address $6: the one the lease's claim or last heartbeat
-- wrote. Found by its address, a TID scan, the row is all the statement
-- reads; by its key it would read a page of the primary key too, where
-- under SERIALIZABLE the predicate lock of every completion conflicts
-- with the index entries the completions of the neighbouring slots
-- write, and most of the callers' transactions failed with 40001
-- (TestCompleteTxUnderSerializable). The guard is tested as always; a row
-- that has moved since (a heartbeat whose reply is on its way) is not
-- found, and CompleteTx goes on by the key (complete).
UPDATE {{.schema}}.slot AS s SET {{template "completed" .}}
WHERE ctid = $6::tid AND {{template "guard" .}}
