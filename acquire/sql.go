package acquire

import (
	"fmt"
	"strings"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// statements are the queue's SQL, rendered once for its schema and order.
// Every statement is scoped to one series ($1 name, $2 interval) and relies
// on the database clock only.
type statements struct {
	lockedBegin string
	selectLocked,
	finishLocked,
	finishOne,
	claim,
	extend,
	complete,
	completeMany,
	fail,
	skip,
	snooze,
	release,
	checkpoint,
	landed,
	releaseOrphans,
	eject,
	failOutOfBand,
	draw,
	lower string
}

// candidates selects up to $3 acquirable slots of the series in [$4, $5)
// and locks them, skipping rows other workers hold: first ACQUIRED slots
// whose lease expired (their holder is presumed dead, and they have waited
// longest), then AVAILABLE slots that are due and not in backoff, in slot
// order, from the part [{{lo}}, {{hi}}) of the range (see floor). A slot is due once slot_end + lag has passed on the database
// clock, whatever the worker's clock says; {{lag}} is the parameter holding
// the lag in microseconds. An expired lease is taken over once it has been
// expired for {{grace}} microseconds (Policy.TakeoverGrace).
//
// Expired leases are found through slot_acquired_idx, by expiry alone, so
// that a claim reads the expired leases, not every lease held, let alone
// every slot of the range. Two choices make that the plan:
//   - expiry is judged against now(), the start of the statement's
//     transaction, not clock_timestamp(): only a stable value can bound
//     the index scan. now() is earlier than the clock by the time since
//     BEGIN (a round trip in locked mode), so a takeover can only come
//     that much later, never earlier;
//   - the range is tested by containment, which no index of the table
//     serves: with slot_start >= $4 AND slot_start < $5 a generic plan
//     (a long-lived connection's, after five executions) guessed the range
//     narrow and scanned it whole through the primary key, once per claim.
//
// Measured: TestLeaseStatementsReadOnlyTheirSlots read the whole 20,000-slot
// series per claim before.
//
// AVAILABLE slots are read in slot order written as slot_start NULLS
// FIRST (NULLS LAST newest first). slot_start is never NULL, so it is the
// same order, but one only slot_available_idx keeps (migration 5): the
// primary key would have to sort every open slot to give it. Ordered
// plainly, the primary key served it too, and when the statistics said
// most of the series was AVAILABLE and the partial index was the larger,
// the planner read the primary key with a status filter: through every
// finished slot before the first acquirable one, once per claim
// (TestClaimsSkipFinishedSlots).
//
// The status test sits in the statement that locks the row, so a slot
// completed meanwhile is never acquired again: under READ COMMITTED the
// locked row is re-checked against the WHERE clause. The second LIMIT
// subtracts what the first found, so no extra row is locked: in locked
// mode a locked row stays locked for the whole job.
const candidates = `
expired AS (
    SELECT ctid, slot_start, slot_end, attempts, fail_count, data, message, true AS took_over, fence AS held_fence,
        generation, owner AS held_owner
    FROM {{schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND status = 'ACQUIRED'
      AND lease_until < now() - {{grace}} * interval '1 microsecond'
      AND tstzrange($4, $5) @> slot_start
    ORDER BY lease_until
    LIMIT $3
    FOR NO KEY UPDATE SKIP LOCKED
),
available AS (
    SELECT ctid, slot_start, slot_end, attempts, fail_count, data, message, false AS took_over, fence AS held_fence,
        generation, NULL::uuid AS held_owner
    FROM {{schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND status = 'AVAILABLE'
      AND (not_before IS NULL OR not_before <= clock_timestamp())
      AND slot_start >= {{lo}} AND slot_start < {{hi}}
      AND slot_start < clock_timestamp() - {{lag}} * interval '1 microsecond'
      AND slot_end <= clock_timestamp() - {{lag}} * interval '1 microsecond'
    ORDER BY slot_start {{order}}
    LIMIT $3 - (SELECT count(*) FROM expired)
    FOR NO KEY UPDATE SKIP LOCKED
),
picked AS (
    SELECT * FROM expired UNION ALL SELECT * FROM available
)`

// notBefore turns a delay in microseconds into the next acquirable time on
// the database clock: NULL for none, 'infinity' for a negative delay (the
// slot is parked).
const notBefore = `CASE WHEN %[1]s IS NULL THEN NULL
        WHEN %[1]s < 0 THEN 'infinity'::timestamptz
        ELSE clock_timestamp() + %[1]s * interval '1 microsecond' END`

// guard is the fencing condition of every lease write: the slot is still
// ours, with the token we were given.
const guard = `name = $1 AND "interval" = $2 AND slot_start = $3 AND status = 'ACQUIRED' AND owner = $4 AND fence = $5`

// listed is the condition each statement given a list of slots ($3) adds
// to its join with that list, so that the primary key finds exactly those
// rows. Without it the planner may hash-join the list with every row of the
// series that passes the other tests: measured, the generic plan of
// CompleteMany read every lease held, by every worker, through
// slot_acquired_idx, and the dead entries of leases completed since the
// last vacuum. The list's first and last starts bound it too: a planner
// that believes the series holds one row (no statistics for it yet: a
// series loaded or added since the last ANALYZE) keeps the list out of the
// index condition, a descent per element for nothing as it sees it, and
// so read the whole series for each statement (80 ms for a completion of
// 100 leases in a 500,000-slot series, 2 ms once analyzed); a range costs
// it nothing, so it always bounds the scan to the list's span
// (TestLeaseListsScaleWithLeases). In a generic plan that planner then
// tests each row of the span against the list, a pass over the list per
// row: the one superlinear cost left, which the statistics remove (a
// heartbeat of 16,000 leases takes 0.40 s without them, 0.18 s with).
const listed = `s.slot_start = ANY($3::timestamptz[])
  AND s.slot_start >= (SELECT min(l) FROM unnest($3::timestamptz[]) AS l)
  AND s.slot_start <= (SELECT max(l) FROM unnest($3::timestamptz[]) AS l)`

// fencesIn is an SQL expression for the set of the fences in param, a
// bigint[] parameter, to test a fence against with <@: a multirange of one
// point per fence, built once (a sort) and searched by bisection, so a
// test per row costs O(log n) whatever the plan. Testing against the
// array itself (= ANY, <> ALL, array_position) costs a pass over it per
// row whenever the server cannot hash it, which it never does for a
// parameter of a generic plan. The set of no fences is empty, never NULL.
//
// A fence stands for its slot too: it is taken from fence_seq once, by
// the claim of one slot (a lease's, an ejection's or a locked-mode
// batch's), and a row only ever carries a fence taken for it (locked
// mode's final write and a failure recorded out of band write back the
// one their own claim took). So a row whose fence is in a list of fences
// given for slots is the row that fence was given for, without pairing
// the two lists.
func fencesIn(param string) string {
	return `(SELECT coalesce(range_agg(int8range(f, f, '[]')), '{}') FROM unnest(` + param + `::bigint[]) AS f)`
}

// held is the guard of the lease writes given a list of slots ($3) with
// their fences ($5): the slots still held by this owner ($4) with those
// fences. It is written so that the primary key is the only way to the
// rows:
//   - the owner test stands for the status test, since slot_lease_check
//     allows an owner on ACQUIRED rows only. A status test lets the planner
//     read every lease of the series through slot_acquired_idx, which looks
//     nearly empty to statistics taken while few leases were held (the
//     usual case: leases come and go faster than the statistics are
//     renewed);
//   - the fences are tested as a set (fencesIn), which names the leases
//     as well as pairing each slot with its fence would. Looking each
//     row's fence up in the list by position (array_position) cost a pass
//     over the list per row: 0.7 s for a completion of 16,000 leases and
//     1.3 s for their heartbeat (TestLeaseListsScaleWithLeases).
//
// Measured (TestLeaseStatementsReadOnlyTheirSlots, statistics taken before
// 1,000 leases were claimed): a heartbeat of 10 leases read 11,075 rows,
// now 10; and with eight workers claiming and completing, a completion of
// 100 leases took 6.7 ms reading 500 leases, now 0.3 ms reading its own.
var held = `s.name = $1 AND s."interval" = $2 AND ` + listed + `
  AND s.owner = $4 AND s.fence <@ ` + fencesIn("$5")

// byPosition subscripts an array of a batch's outcomes (in a relation v,
// with the batch's slot starts sorted in v.slot_start) at the position of
// the row s being written: a bisection of the starts, as their array is
// sorted.
const byPosition = `[width_bucket(s.slot_start, v.slot_start)]`

// lockedRows is the condition by which an UPDATE of the slot table (alias
// s) takes the rows that rel, a CTE of the same statement, has just found
// and locked (with their ctid and slot_start): by their addresses (ctid),
// the versions the locking returned. That is a TID scan per row, not
// another descent of the primary key per slot, which was a third of a
// claim's work with eight workers claiming (1,874 of 2,918 buffer reads in
// one claim of 100).
//
// The other way the planner may take, when it expects many rows, is to
// hash them with a scan of the series; the bounds by rel's first and last
// starts keep that scan to the part of the series they span. Taking the
// rows by an array of their addresses (ctid = ANY) made the TID scan the
// only plan, but when the planner joined the rows back one by one (for the
// values the update returns), it also tested each against the whole array:
// a claim of 16,000 slots took 0.5 s in a generic plan, and taking over
// 16,000 expired leases as long in any plan, against 0.17 s now
// (TestLeaseListsScaleWithLeases).
//
// A row whose newest version was committed after the statement began (and
// still passed the recheck when it was locked) is not visible to the
// update's scan and is left out; the next statement takes it. The series
// is tested too, so that every statement names its series (a sharded
// table routes by it).
func lockedRows(rel string) string {
	return `s.ctid = ` + rel + `.ctid AND s.name = $1 AND s."interval" = $2 AND s.slot_start = ` + rel + `.slot_start
  AND s.slot_start >= (SELECT min(slot_start) FROM ` + rel + `) AND s.slot_start <= (SELECT max(slot_start) FROM ` + rel + `)`
}

// takenByLocked is the message of a locked-mode takeover's event.
const takenByLocked = `'lease expired; taken over by a locked-mode worker'`

// logEvent starts the insert of history rows (slot_event). Every outcome is
// recorded by the statement that writes it, from the rows that statement
// changed: set-based, in the same round trip, and only if the write
// happened. Messages are cut to 1024 characters, which the table's
// 4096-byte bound always admits.
const logEvent = `INSERT INTO {{schema}}.slot_event (at, name, "interval", slot_start, event, generation, owner, fence, attempt, message)`

// logged wraps a guarded lease write (an UPDATE of one slot with $4 the
// owner) so that it also records event with message, an expression over the
// updated row (alias d, with the columns of extra) or NULL. Its row count
// stays the number of slots changed.
func logged(update, extra, event, message string) string {
	return `WITH d AS (` + update + `
RETURNING slot_start, generation, fence, attempts` + extra + `)
` + logEvent + `
SELECT clock_timestamp(), $1, $2, d.slot_start, ` + event + `, d.generation, $4, d.fence, d.attempts, ` + message + ` FROM d`
}

func renderStatements(schema string, newestFirst bool) statements {
	// The NULLS clause matches slot_available_idx (see candidates).
	order := "ASC NULLS FIRST"
	if newestFirst {
		order = "DESC NULLS LAST"
	}
	r := func(sql string) string {
		sql = strings.ReplaceAll(sql, "{{candidates}}", candidates)
		sql = strings.ReplaceAll(sql, "{{order}}", order)
		sql = strings.ReplaceAll(sql, "{{not_before}}", notBefore)
		sql = strings.ReplaceAll(sql, "{{guard}}", guard)
		sql = strings.ReplaceAll(sql, "{{listed}}", listed)
		sql = strings.ReplaceAll(sql, "{{held}}", held)
		sql = strings.ReplaceAll(sql, "%[1]s", "v.delay_us")
		return sqlschema.Render(sql, schema)
	}
	// withLag names the parameters of a statement built on candidates that
	// hold the lag, the takeover grace, and the part of the range searched
	// for AVAILABLE slots, [lo, hi) (see floor).
	withLag := func(lag, grace, lo, hi, sql string) string {
		return strings.NewReplacer("{{lag}}", lag, "{{grace}}", grace, "{{lo}}", lo, "{{hi}}", hi).Replace(r(sql))
	}
	return statements{
		// One round trip sets everything the transaction relies on, whatever
		// the role's defaults: READ COMMITTED (the status re-check above
		// depends on it), no statement or lock timeout on the handler's work
		// (MaxWork bounds it), the dead-man switch, and server-side TCP
		// settings that notice a vanished client host.
		// almanac.engine marks the transaction as almanac's own for the
		// slot table's plain-SQL triggers, which then stay out of the way.
		lockedBegin: `BEGIN ISOLATION LEVEL READ COMMITTED;
SET LOCAL almanac.engine = on;
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = 0;
SET LOCAL idle_in_transaction_session_timeout = %d;
SET LOCAL tcp_keepalives_idle = %d;
SET LOCAL tcp_keepalives_interval = %d;
SET LOCAL tcp_keepalives_count = 3;
SET LOCAL tcp_user_timeout = %d`,

		// The transaction id comes with the slots (locking rows gave the
		// transaction one already): if the connection is lost during
		// COMMIT, it tells whether the outcomes committed.
		selectLocked: withLag("$6", "$7", "$8", "$9", `WITH {{candidates}}
SELECT slot_start, slot_end, attempts, fail_count, data, message, took_over, nextval('{{schema}}.fence_seq'), generation,
    held_fence, held_owner, `+retry.CurrentXact+`
FROM picked ORDER BY slot_start {{order}}`),

		// The one write of a locked-mode run: every outcome of the batch in
		// one statement, values computed by the worker from the locked rows
		// except the clock-based ones, and their history: one event per
		// outcome ($11, by $12, the queue's owner) but completions, which
		// the row records (completed_by), and one per expired lease the
		// batch took over (its owner $13 and fence $14, NULL for the
		// others), dated at the start of the transaction, when the batch
		// took them.
		//
		// The outcomes are given as arrays sorted by slot start ($3), and
		// each row takes its values by its position in them, found by
		// bisection (width_bucket; see byPosition): a lookup, not a join. Joined
		// with the arrays unnested, the planner ran a nested loop that
		// unnested every array again for every row, in custom plans too:
		// 3.4 ms for a batch of 100 (0.6 ms now), and 0.9 s for 2,000 in
		// a generic plan (TestLockedBatchScalesWithSlots). A row whose
		// start is not at its position (arrays not sorted) is not written,
		// and the statement returns how many were: finish fails the batch
		// rather than commit its work with outcomes missing. It sends at
		// most outcomesPerStatement outcomes at once.
		finishLocked: r(`WITH d AS (
UPDATE {{schema}}.slot AS s SET
    status = v.status` + byPosition + `, fence = v.fence` + byPosition + `, attempts = v.attempts` + byPosition + `, fail_count = v.fail_count` + byPosition + `,
    message = v.message` + byPosition + `, owner = NULL, lease_until = NULL,
    not_before = ` + fmt.Sprintf(notBefore, "v.delay_us"+byPosition) + `,
    data = coalesce(v.data` + byPosition + `, s.data),
    completed_at = CASE WHEN v.status` + byPosition + ` = 'COMPLETE' THEN clock_timestamp() ELSE s.completed_at END,
    completed_by = CASE WHEN v.status` + byPosition + ` = 'COMPLETE' THEN $12::uuid END,
    updated_at = clock_timestamp()
FROM (SELECT $3::timestamptz[] AS slot_start, $4::text[] AS status, $5::bigint[] AS fence, $6::int[] AS attempts,
        $7::int[] AS fail_count, $8::text[] AS message, $9::bigint[] AS delay_us, $10::jsonb[] AS data, $11::text[] AS event,
        $13::uuid[] AS held_owner, $14::bigint[] AS held_fence) AS v
WHERE s.name = $1 AND s."interval" = $2 AND {{listed}} AND v.slot_start` + byPosition + ` = s.slot_start
RETURNING s.slot_start, s.generation, s.fence, s.attempts, v.event` + byPosition + ` AS event, v.message` + byPosition + ` AS message,
    v.held_owner` + byPosition + ` AS held_owner, v.held_fence` + byPosition + ` AS held_fence
), logged AS (
` + logEvent + `
SELECT clock_timestamp(), $1, $2, d.slot_start, d.event, d.generation, $12::uuid, d.fence, d.attempts,
    CASE WHEN d.event IN ('failed', 'parked', 'skipped') THEN left(d.message, 1024) END
FROM d WHERE d.event <> 'completed'
UNION ALL
SELECT now(), $1, $2, d.slot_start, 'taken_over', d.generation, d.held_owner, d.held_fence, d.attempts - 1, ` + takenByLocked + `
FROM d WHERE d.held_owner IS NOT NULL
)
SELECT count(*) FROM d`),

		// finishLocked for a batch of one slot (Run), with scalar parameters
		// in the same places. Planning is most of the cost of a one-row
		// statement, and this one plans about as fast as the bare UPDATE
		// without history did (measured: 0.22 ms against 0.34 ms for the
		// batch form on one row); a custom plan drops the takeover branch
		// when $13 is NULL.
		finishOne: r(`WITH d AS (
UPDATE {{schema}}.slot AS s SET
    status = $4, fence = $5, attempts = $6, fail_count = $7, message = $8, owner = NULL, lease_until = NULL,
    not_before = ` + fmt.Sprintf(notBefore, "$9::bigint") + `,
    data = coalesce($10::jsonb, s.data),
    completed_at = CASE WHEN $4 = 'COMPLETE' THEN clock_timestamp() ELSE s.completed_at END,
    completed_by = CASE WHEN $4 = 'COMPLETE' THEN $12::uuid END,
    updated_at = clock_timestamp()
WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = $3
RETURNING s.slot_start, s.generation, s.fence, s.attempts
)
` + logEvent + `
SELECT clock_timestamp(), $1, $2, d.slot_start, $11::text, d.generation, $12::uuid, d.fence, d.attempts,
    CASE WHEN $11::text IN ('failed', 'parked', 'skipped') THEN left($8, 1024) END
FROM d WHERE $11::text <> 'completed'
UNION ALL
SELECT now(), $1, $2, d.slot_start, 'taken_over', d.generation, $13::uuid, $14::bigint, d.attempts - 1, ` + takenByLocked + `
FROM d WHERE $13::uuid IS NOT NULL`),

		// A claim records no event (the slot row shows its holder), except
		// for an expired lease it takes over: the run that lost it. The
		// update takes the rows just locked by their addresses (see
		// lockedRows).
		claim: withLag("$8", "$9", "$10", "$11", `WITH {{candidates}},
claimed AS (
UPDATE {{schema}}.slot AS s SET
    status = 'ACQUIRED', owner = $6, fence = nextval('{{schema}}.fence_seq'),
    lease_until = clock_timestamp() + $7 * interval '1 microsecond',
    attempts = s.attempts + 1, updated_at = clock_timestamp()
FROM picked
WHERE `+lockedRows("picked")+`
RETURNING s.slot_start, s.slot_end, s.attempts, s.fail_count, s.data, s.message, picked.took_over, s.fence, s.generation, s.lease_until,
    picked.held_owner, picked.held_fence, picked.attempts AS held_attempts
),
taken AS (
`+logEvent+`
SELECT clock_timestamp(), $1, $2, c.slot_start, 'taken_over', c.generation, c.held_owner, c.held_fence, c.held_attempts,
    format('lease expired; taken over by %s with fence %s', $6, c.fence)
FROM claimed AS c WHERE c.took_over
)
SELECT slot_start, slot_end, attempts, fail_count, data, message, took_over, fence, generation, lease_until FROM claimed`),

		// A heartbeat must not queue behind a row another transaction has
		// locked (a locked-mode worker taking an expired lease over holds
		// it for a whole job), or every other lease of the holder would
		// expire meanwhile. So it extends the rows it can lock now and
		// reports, for each lease still ours, the new deadline or NULL when
		// the row was busy; a lease missing from the result is lost.
		// The update takes the rows free has found by the list and locked,
		// by their addresses (see lockedRows). The busy ones are those of
		// ours not extended, found by a membership test
		// (sqlschema.StartsOf), not a join: planned
		// for a list of ten (a generic plan's guess) or for a series
		// without statistics, the join of ours with extended ran as a
		// nested loop over both, and a heartbeat of 10,000 leases took
		// 5.4 s.
		extend: r(`WITH ours AS (
    SELECT s.slot_start FROM {{schema}}.slot AS s WHERE {{held}}
), free AS (
    SELECT s.ctid, s.slot_start FROM {{schema}}.slot AS s WHERE {{held}}
    FOR NO KEY UPDATE SKIP LOCKED
), extended AS (
    UPDATE {{schema}}.slot AS s SET lease_until = clock_timestamp() + $6 * interval '1 microsecond'
    FROM free
    WHERE ` + lockedRows("free") + `
    RETURNING s.slot_start, s.lease_until
)
SELECT e.slot_start, e.lease_until FROM extended e
UNION ALL
SELECT o.slot_start, NULL FROM ours o WHERE NOT (o.slot_start <@ ` + sqlschema.StartsOf("extended") + `)`),

		// A completion is recorded on the row (completed_at, completed_by),
		// not as a history event: a re-open moves it into its own event
		// (see migration 004 and the slot_history view).
		complete: r(`UPDATE {{schema}}.slot SET
    status = 'COMPLETE', owner = NULL, lease_until = NULL, not_before = NULL, fail_count = 0,
    message = NULL, completed_at = clock_timestamp(), completed_by = $4, updated_at = clock_timestamp()
WHERE {{guard}}`),

		completeMany: r(`UPDATE {{schema}}.slot AS s SET
    status = 'COMPLETE', owner = NULL, lease_until = NULL, not_before = NULL, fail_count = 0,
    message = NULL, completed_at = clock_timestamp(), completed_by = $4, updated_at = clock_timestamp()
WHERE {{held}}
RETURNING s.slot_start`),

		fail: r(logged(`UPDATE {{schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, fail_count = $6, message = $7,
    not_before = {{not_before}}, updated_at = clock_timestamp()
FROM (SELECT $8::bigint AS delay_us) AS v
WHERE {{guard}}`, ", v.delay_us < 0 AS parked", "CASE WHEN d.parked THEN 'parked' ELSE 'failed' END", "left($7, 1024)")),

		skip: r(logged(`UPDATE {{schema}}.slot SET
    status = 'SKIP', owner = NULL, lease_until = NULL, not_before = NULL, message = $6, updated_at = clock_timestamp()
WHERE {{guard}}`, "", "'skipped'", "left($6, 1024)")),

		snooze: r(logged(`UPDATE {{schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, data = coalesce($7, s.data), message = coalesce($8::text, s.message),
    not_before = {{not_before}}, updated_at = clock_timestamp()
FROM (SELECT $6::bigint AS delay_us) AS v
WHERE {{guard}}`, "", "'snoozed'", "left($8::text, 1024)")),

		release: r(logged(`UPDATE {{schema}}.slot SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, updated_at = clock_timestamp()
WHERE {{guard}}`, "", "'released'", "NULL")),

		// Which of the slots $3 (with fences $4) are in status $5 with
		// those fences and no holder: the final writes that committed. The
		// fences are a set (fencesIn): joined with the list, in a nested
		// loop, every row was tested against the whole list (9 s for
		// 16,000 slots in a generic plan).
		landed: r(`SELECT s.slot_start FROM {{schema}}.slot AS s
WHERE s.name = $1 AND s."interval" = $2 AND {{listed}} AND s.fence <@ ` + fencesIn("$4") + ` AND s.status = $5 AND s.owner IS NULL`),

		// The slots this owner ($3) holds with none of the fences $4: leases
		// nobody works on (see Queue.releaseOrphans).
		releaseOrphans: r(`UPDATE {{schema}}.slot SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, updated_at = clock_timestamp()
WHERE name = $1 AND "interval" = $2 AND status = 'ACQUIRED' AND owner = $3 AND NOT fence <@ ` + fencesIn("$4")),

		checkpoint: r(`UPDATE {{schema}}.slot SET data = $6, updated_at = clock_timestamp() WHERE {{guard}}`),

		// Ejection takes a held (or acquirable) slot now, whoever holds it.
		// NOWAIT: a slot locked by a locked-mode transaction cannot be taken
		// from it, and waiting for that transaction would defeat the point.
		// A locked-mode failure recorded after its transaction died (see
		// recordTimeouts): only if the slot is as that transaction found it.
		// It waits for the row lock (under a short lock_timeout) because
		// the dead transaction's backend may take a moment to release it. A
		// lease its old holder renewed meanwhile is left alone.
		failOutOfBand: r(`WITH target AS (
    SELECT slot_start FROM {{schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND slot_start = $3 AND fence = $4
      AND (status = 'AVAILABLE' OR status = 'ACQUIRED' AND lease_until < clock_timestamp())
    FOR NO KEY UPDATE
),
d AS (
UPDATE {{schema}}.slot AS s SET
    status = 'AVAILABLE', owner = NULL, lease_until = NULL, fence = $5, attempts = $6, fail_count = $7,
    message = $8, not_before = {{not_before}}, updated_at = clock_timestamp()
FROM target AS t, (SELECT $9::bigint AS delay_us) AS v
WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = t.slot_start
RETURNING s.slot_start, s.generation, v.delay_us < 0 AS parked
)
` + logEvent + `
SELECT clock_timestamp(), $1, $2, d.slot_start, CASE WHEN d.parked THEN 'parked' ELSE 'failed' END, d.generation,
    $10::uuid, $5, $6, left($8, 1024)
FROM d`),

		// A draw of a block of $5 parts of $3 slots from the series'
		// frontier, from part $4 on at the earliest (see frontier); it
		// returns the block's first part, or nothing when the block would
		// start at part $6 or later, past the end of the queue's range.
		// One row per series and part size, written in a transaction of its
		// own: its lock is held for the statement only.
		draw: r(`INSERT INTO {{schema}}.slot_frontier (name, "interval", part_slots, next_part)
SELECT $1, $2, $3, $4::bigint + $5::bigint WHERE $4::bigint < $6::bigint
ON CONFLICT (name, "interval", part_slots) DO UPDATE SET next_part = greatest(slot_frontier.next_part, $4::bigint) + $5::bigint
    WHERE greatest(slot_frontier.next_part, $4::bigint) < $6::bigint
RETURNING next_part - $5::bigint`),

		// Lowering the frontier to part $4 of $3 slots, when it is further.
		lower: r(`UPDATE {{schema}}.slot_frontier SET next_part = $4
WHERE name = $1 AND "interval" = $2 AND part_slots = $3 AND next_part > $4::bigint`),

		// An ejection records the run it ended, if the slot was held.
		eject: r(`WITH target AS (
    SELECT slot_start, status = 'ACQUIRED' AS took_over, owner AS held_owner, fence AS held_fence, attempts AS held_attempts
    FROM {{schema}}.slot
    WHERE name = $1 AND "interval" = $2 AND slot_start = $3 AND status IN ('AVAILABLE', 'ACQUIRED')
    FOR NO KEY UPDATE NOWAIT
),
claimed AS (
UPDATE {{schema}}.slot AS s SET
    status = 'ACQUIRED', owner = $4, fence = nextval('{{schema}}.fence_seq'),
    lease_until = clock_timestamp() + $5 * interval '1 microsecond',
    attempts = s.attempts + 1, not_before = NULL, updated_at = clock_timestamp()
FROM target AS t
WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = t.slot_start
RETURNING s.slot_start, s.slot_end, s.attempts, s.fail_count, s.data, s.message, t.took_over, s.fence, s.generation, s.lease_until,
    t.held_owner, t.held_fence, t.held_attempts
),
ejected AS (
` + logEvent + `
SELECT clock_timestamp(), $1, $2, c.slot_start, 'ejected', c.generation, c.held_owner, c.held_fence, c.held_attempts,
    format('ejected by %s with fence %s', $4, c.fence)
FROM claimed AS c WHERE c.took_over
)
SELECT slot_start, slot_end, attempts, fail_count, data, message, took_over, fence, generation, lease_until FROM claimed`),
	}
}
