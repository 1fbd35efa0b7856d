-- One round trip sets everything a locked-mode transaction relies on,
-- whatever the role's defaults: READ COMMITTED (the status re-check of
-- candidates depends on it), no statement or lock timeout on the handler's
-- work (MaxWork bounds it), the dead-man switch (idle in transaction for
-- DeadMan), and server-side TCP settings that notice a vanished client
-- host. almanac.engine marks the transaction as almanac's own for the slot
-- table's plain-SQL triggers, which then stay out of the way.
BEGIN ISOLATION LEVEL READ COMMITTED;
SET LOCAL almanac.engine = on;
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = 0;
SET LOCAL idle_in_transaction_session_timeout = {{.deadManMs}};
SET LOCAL tcp_keepalives_idle = {{.keepaliveIdle}};
SET LOCAL tcp_keepalives_interval = {{.keepaliveInterval}};
SET LOCAL tcp_keepalives_count = 3;
SET LOCAL tcp_user_timeout = {{.deadManMs}}
