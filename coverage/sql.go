package coverage

import (
	"strings"
	"sync"

	"github.com/almanacdev/almanac/internal/sqlschema"
)

// statements are the client's SQL, rendered for its schema once. Every
// statement is scoped to one series: $1 is the name, $2 the interval.
type statements struct {
	countParts, listParts                  string
	insertSlots, insertSlotsOrIgnore       string
	insertRuns, insertRunsOrIgnore         string
	skipSlots, skipSlotsOrIgnore           string
	skipRuns, skipRunsOrIgnore             string
	skipInserted, reopenInserted, setActor string
	reopen, reopenDry, retry, retryDry     string
	skip, skipDry, extent, firstSlot       string
	history, current                       string
	covered, recordStored, deletions       string
	lockDeletions                          string
	compactedIn, openCounts, heatmapCounts string
	heatmapAllRows                         string
	compact, compactCount, mergeCompacted  string
	restore, restoreSlots, compactedCount  string
	restoreDownstream                      string
	hasUpstream, waitingUpstream           string
	waitingOn                              string
}

// inRange selects the rows of the series starting in [$3, $4).
const inRange = `s.name = $1 AND s."interval" = $2 AND s.slot_start >= $3 AND s.slot_start < $4`

// heldColumns aggregate the held rows (alias c) of a chunk in slot order.
const heldColumns = `
	coalesce(array_agg(c.slot_start ORDER BY c.slot_start) FILTER (WHERE c.held), '{}'),
	coalesce(array_agg(c.slot_end ORDER BY c.slot_start) FILTER (WHERE c.held), '{}'),
	coalesce(array_agg(c.status ORDER BY c.slot_start) FILTER (WHERE c.held), '{}'),
	coalesce(array_agg(coalesce(c.owner::text, '') ORDER BY c.slot_start) FILTER (WHERE c.held), '{}'),
	coalesce(array_agg(c.lease_until ORDER BY c.slot_start) FILTER (WHERE c.held), '{}')`

// Each count is its own index-only scan of the primary key: one statement
// costs about what a single count over all the parts would.
const countParts = `SELECT (SELECT count(*) FROM {{schema}}.slot s
		WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start >= b.lo AND s.slot_start < b.hi)
	FROM unnest($3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS b(lo, hi, i)
	ORDER BY b.i`

// listParts returns the stored starts of each part, as an array per part:
// a correlated subquery is always run per part on the index, where a join
// is planned from statistics, and on a table not analyzed since a big
// insert the planner may read the whole series once per part
// (docs/design/plan-stable-sql.md, rule 6).
const listParts = `SELECT ARRAY(SELECT s.slot_start FROM {{schema}}.slot s
		WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start >= b.lo AND s.slot_start < b.hi
		ORDER BY s.slot_start)
	FROM unnest($3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS b(lo, hi, i)
	ORDER BY b.i`

// insertSlots inserts slots given by their bounds, computed by the grid.
const insertSlots = `INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, message)
	SELECT $1, $2, u.s, u.e, $5, $6::text FROM unnest($3::timestamptz[], $4::timestamptz[]) AS u(s, e)`

// insertRuns inserts runs of slots of a fixed interval of $7 microseconds:
// n slots from lo each. The start of the run comes from the grid and the
// offsets are absolute microseconds, exact as long as they stay below 2^53
// (the multiplication is done in float8), which the caller ensures. This
// spares encoding two timestamps per slot on the client (measured: 0.2 s
// of client CPU per million slots).
const insertRuns = `INSERT INTO {{schema}}.slot (name, "interval", slot_start, slot_end, status, message)
	SELECT $1, $2, r.lo + (k * $7::bigint) * interval '1 microsecond', r.lo + ((k + 1) * $7::bigint) * interval '1 microsecond', $5, $6::text
	FROM unnest($3::timestamptz[], $4::bigint[]) AS r(lo, n), generate_series(0, r.n - 1) AS k`

// The history of the slots an operation changes is written by the slot
// table's trigger (slot_record, migration 11), from each row's change, as
// the schema's owner: the client's role may not write history itself. The
// client names its actor for the trigger in each write transaction
// (setActor). Slots an operation inserts with a history (skipped, or
// restored from compaction by a re-open) are inserted as they were before
// the change, and changed by a second statement (touchInserted), which the
// trigger records: an insert has no trigger that records, since its test
// would cost every materialized slot.

// setActor names the client's actor ($1, NULL for the session's role) for
// the rest of the transaction.
const setActor = `SELECT set_config('almanac.actor', coalesce($1::text, session_user::text), true)`

// inserted makes an insert return the starts of the slots it inserted, for
// touchInserted.
const inserted = ` RETURNING slot_start`

// touchInserted applies the change set (a SET list) to the slots of the
// series starting at $3, which the transaction has just inserted, in slot
// order; bounded by the list's first and last starts, like acquire's
// listed fragment, so that the primary key finds exactly those rows.
func touchInserted(set string) string {
	return `UPDATE {{schema}}.slot s SET ` + set + `, updated_at = clock_timestamp()
	WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start = ANY($3::timestamptz[])
	  AND s.slot_start >= (SELECT min(l) FROM unnest($3::timestamptz[]) AS l)
	  AND s.slot_start <= (SELECT max(l) FROM unnest($3::timestamptz[]) AS l)`
}

// The operations below (re-open, retry, skip) join no two sets of slots.
// A series loaded in bulk has no column statistics until the next ANALYZE,
// and a range of slots restored from compaction none until the statement
// that inserted them commits; without them the planner estimates every
// range of the series at one row, and a join of the rows locked with the
// rows read, or of the update with the rows locked, runs as a nested loop
// comparing every slot of a chunk with every other, whose time grows with
// the square of the chunk (docs/design/plan-stable-sql.md, rule 6). So a
// set of slots is tested
// for membership in another through sqlschema.StartsOf, the update takes
// its rows by that test within the chunk's range, and the history is
// written from the locked rows, which are exactly the rows the update
// changes (they are ours until the transaction ends). Every step is then
// one pass over its rows whatever the planner estimates
// (TestOperationsScaleWithoutStatistics).

// marked is the CTE of the candidate rows with their held flag (a test of
// each against a sqlschema.StartsOf set), computed once per row:
// heldColumns reads the flag five times.
func marked(held string) string {
	return `,
marked AS MATERIALIZED (SELECT c.*, ` + held + ` AS held FROM candidate c)`
}

// updateTargets is the WHERE of an update of the rows of CTE target.
var updateTargets = `WHERE ` + inRange + ` AND s.slot_start <@ ` + sqlschema.StartsOf("target")

// reopen re-opens the rows of [$3, $4) whose status is in $5, and parked
// ones when $6, with reason $7. Acquirable AVAILABLE rows are locked too,
// only to find those a locked-mode worker holds: they are reported, like
// leased (ACQUIRED) rows and targets that another transaction has locked.
// One clock reading decides what is parked or in backoff for the whole
// statement.
var reopen = `WITH now_ AS MATERIALIZED (SELECT clock_timestamp() AS t),
candidate AS (
	SELECT s.slot_start, s.slot_end, s.status, s.owner, s.lease_until
	FROM {{schema}}.slot s, now_
	WHERE ` + inRange + `
	  AND (s.status = 'ACQUIRED' OR s.status = ANY($5::text[])
	       OR s.status = 'AVAILABLE' AND (s.not_before IS NULL OR s.not_before <= now_.t OR $6 AND s.not_before = 'infinity'))
),
locked AS (
	SELECT s.slot_start, s.status, s.not_before
	FROM {{schema}}.slot s, now_
	WHERE ` + inRange + `
	  AND (s.status = ANY($5::text[])
	       OR s.status = 'AVAILABLE' AND (s.not_before IS NULL OR s.not_before <= now_.t OR $6 AND s.not_before = 'infinity'))
	ORDER BY s.slot_start
	FOR NO KEY UPDATE OF s SKIP LOCKED
),
target AS (
	SELECT l.* FROM locked l
	WHERE l.status = ANY($5::text[]) OR $6 AND l.status = 'AVAILABLE' AND l.not_before = 'infinity'
),
changed AS ({{changed}})
` + marked(`c.status = 'ACQUIRED' OR NOT (c.slot_start <@ `+sqlschema.StartsOf("locked")+`)`) + `
SELECT (SELECT count(*) FROM changed),` + heldColumns + ` FROM marked c`

// reopenUpdate is what a re-open changes: the slot is redone from scratch,
// as a new generation, so the counters, the backoff and the previous
// generation's checkpoint (data) and completion time go; the fence stays,
// so tokens keep growing.
var reopenUpdate = `UPDATE {{schema}}.slot s SET status = 'AVAILABLE', message = $7, fail_count = 0, attempts = 0,
		not_before = NULL, owner = NULL, lease_until = NULL, data = NULL, completed_at = NULL, completed_by = NULL,
		generation = s.generation + 1, updated_at = clock_timestamp()
	` + updateTargets + `
	RETURNING s.slot_start`

// retrySQL clears the backoff of the rows of [$3, $4) that are in backoff or
// parked, and the failure count of parked ones, so the retry policy starts
// afresh for them.
var retrySQL = `WITH now_ AS MATERIALIZED (SELECT clock_timestamp() AS t),
candidate AS (
	SELECT s.slot_start, s.slot_end, s.status, s.owner, s.lease_until
	FROM {{schema}}.slot s, now_
	WHERE ` + inRange + ` AND s.status = 'AVAILABLE' AND s.not_before > now_.t
),
target AS (
	SELECT s.slot_start, s.not_before = 'infinity' AS unparked
	FROM {{schema}}.slot s, now_
	WHERE ` + inRange + ` AND s.status = 'AVAILABLE' AND s.not_before > now_.t
	ORDER BY s.slot_start
	FOR NO KEY UPDATE OF s SKIP LOCKED
),
changed AS ({{changed}})
` + marked(`NOT (c.slot_start <@ `+sqlschema.StartsOf("target")+`)`) + `
SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM target WHERE unparked),` + heldColumns + ` FROM marked c`

var retryUpdate = `UPDATE {{schema}}.slot s SET not_before = NULL,
		fail_count = CASE WHEN s.not_before = 'infinity' THEN 0 ELSE s.fail_count END,
		updated_at = clock_timestamp()
	` + updateTargets + `
	RETURNING s.slot_start`

// skip marks the AVAILABLE rows of [$3, $4) SKIP with reason $5, and counts
// the rows it leaves alone: COMPLETE, already SKIP, and held.
var skip = `WITH candidate AS (
	SELECT s.slot_start, s.slot_end, s.status, s.owner, s.lease_until
	FROM {{schema}}.slot s
	WHERE ` + inRange + `
),
target AS (
	SELECT s.slot_start
	FROM {{schema}}.slot s
	WHERE ` + inRange + ` AND s.status = 'AVAILABLE'
	ORDER BY s.slot_start
	FOR NO KEY UPDATE OF s SKIP LOCKED
),
changed AS ({{changed}})
` + marked(`c.status = 'ACQUIRED' OR c.status = 'AVAILABLE' AND NOT (c.slot_start <@ `+sqlschema.StartsOf("target")+`)`) + `
SELECT (SELECT count(*) FROM changed),
	count(*) FILTER (WHERE c.status = 'COMPLETE'),
	count(*) FILTER (WHERE c.status = 'SKIP'),` + heldColumns + `
FROM marked c`

var skipUpdate = `UPDATE {{schema}}.slot s SET status = 'SKIP', message = $5, not_before = NULL, updated_at = clock_timestamp()
	` + updateTargets + `
	RETURNING s.slot_start`

// openRows selects the open rows (AVAILABLE, ACQUIRED) of [$3, $4) from
// their partial indexes, never reading finished rows.
const openRows = `SELECT s.slot_start, s.status, s.not_before, s.lease_until, s.fail_count, s.message, s.updated_at
	FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'AVAILABLE'
	UNION ALL
	SELECT s.slot_start, s.status, s.not_before, s.lease_until, s.fail_count, s.message, s.updated_at
	FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'ACQUIRED'`

// lastCompleted reads the latest completion time of the COMPLETE slots of
// [$3, $4) (uncorrelated: computed once per statement). It reads the
// range's rows through the primary key: completions do not follow slot
// order (a backfill completes old slots last), and "the last completion"
// is what a person asks when they ask whether the workers are running.
// Compaction keeps the rows of old ranges few.
const lastCompleted = `(SELECT max(s.completed_at) FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'COMPLETE')`

// hasUpstream says whether the series depends on upstream series.
const hasUpstreamSQL = `SELECT EXISTS (SELECT FROM {{schema}}.series_dependency WHERE name = $1 AND "interval" = $2)`

// waitingUpstreamSQL counts the AVAILABLE slots of [$3, $4), not in
// backoff, that wait for an upstream series: some upstream has not
// finished their span (upstream_done, migration 9). Only run for a series
// with dependencies: it costs a check per open slot.
const waitingUpstreamSQL = `SELECT count(*) FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'AVAILABLE'
	AND (s.not_before IS NULL OR s.not_before <= clock_timestamp())
	AND EXISTS (SELECT FROM {{schema}}.series_dependency d WHERE d.name = $1 AND d."interval" = $2
		AND NOT {{schema}}.upstream_done(d.up_name, d.up_interval, s.slot_start, s.slot_end))`

// waitingOnSQL lists what the first $5 slots of [$3, $4) that wait for
// an upstream series (as waitingUpstreamSQL counts them) wait on, at most
// $5 rows in all, in slot order, then by upstream series and start: the
// upstream rows overlapping the slot that are not COMPLETE or SKIP, and
// the parts of the slot's span that no upstream row or compacted range
// covers (status MISSING). The bound on the upstream starts is
// upstream_done's (migration 9), for the primary key.
const waitingOnSQL = `WITH w AS (
	SELECT s.slot_start, s.slot_end FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'AVAILABLE'
		AND (s.not_before IS NULL OR s.not_before <= clock_timestamp())
		AND EXISTS (SELECT FROM {{schema}}.series_dependency d WHERE d.name = $1 AND d."interval" = $2
			AND NOT {{schema}}.upstream_done(d.up_name, d.up_interval, s.slot_start, s.slot_end))
	ORDER BY s.slot_start LIMIT $5)
SELECT w.slot_start, b.up_name, b.up_interval, b.lo, b.hi, b.status, b.parked, b.message, b.updated_at
FROM w CROSS JOIN LATERAL (
	SELECT d.up_name, d.up_interval, x.slot_start AS lo, x.slot_end AS hi, x.status, x.not_before = 'infinity' AS parked,
		x.message, x.updated_at
	FROM {{schema}}.series_dependency d
	JOIN {{schema}}.slot x ON x.name = d.up_name AND x."interval" = d.up_interval
		AND x.slot_start < w.slot_end AND x.slot_end > w.slot_start
		AND x.slot_start > w.slot_start - 2 * d.up_interval::interval - interval '1 day'
		AND x.status NOT IN ('COMPLETE', 'SKIP')
	WHERE d.name = $1 AND d."interval" = $2
	UNION ALL
	SELECT d.up_name, d.up_interval, lower(m.r), upper(m.r), 'MISSING', false, NULL, NULL
	FROM {{schema}}.series_dependency d
	CROSS JOIN LATERAL unnest(tstzmultirange(tstzrange(w.slot_start, w.slot_end))
		- (SELECT coalesce(range_agg(tstzrange(x.slot_start, x.slot_end)), '{}') FROM {{schema}}.slot x
			WHERE x.name = d.up_name AND x."interval" = d.up_interval
				AND x.slot_start < w.slot_end AND x.slot_end > w.slot_start
				AND x.slot_start > w.slot_start - 2 * d.up_interval::interval - interval '1 day')
		- (SELECT coalesce(range_agg(tstzrange(c.range_start, c.range_end)), '{}') FROM {{schema}}.slot_compacted c
			WHERE c.name = d.up_name AND c."interval" = d.up_interval
				AND c.range_start < w.slot_end AND c.range_end > w.slot_start)) AS m(r)
	WHERE d.name = $1 AND d."interval" = $2) b
ORDER BY w.slot_start, b.up_name, b.up_interval, b.lo
LIMIT $5`

// openCounts counts the open slots of a range by state (openRows), the
// SKIP ones from their partial index, and reads lastCompleted. It also
// finds the open slot whose message was written last: only the open rows
// with a message are sorted, and the winner's columns are read by its key.
const openCounts = `WITH now_ AS MATERIALIZED (SELECT clock_timestamp() AS t),
o AS (` + openRows + `),
c AS (SELECT
	count(*) FILTER (WHERE o.status = 'AVAILABLE' AND (o.not_before IS NULL OR o.not_before <= now_.t)) AS available,
	count(*) FILTER (WHERE o.status = 'AVAILABLE' AND o.not_before > now_.t AND o.not_before <> 'infinity') AS backoff,
	count(*) FILTER (WHERE o.status = 'AVAILABLE' AND o.not_before = 'infinity') AS parked,
	count(*) FILTER (WHERE o.status = 'ACQUIRED') AS acquired,
	count(*) FILTER (WHERE o.status = 'ACQUIRED' AND o.lease_until < now_.t) AS expired,
	min(o.slot_start) AS oldest,
	(array_agg(o.slot_start ORDER BY o.updated_at DESC) FILTER (WHERE o.message IS NOT NULL))[1] AS noted
FROM o, now_)
SELECT c.available, c.backoff, c.parked, c.acquired, c.expired,
	(SELECT count(*) FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'SKIP'),
	c.oldest, ` + lastCompleted + `,
	c.noted, m.status, m.not_before = 'infinity', m.message, m.updated_at
FROM c LEFT JOIN {{schema}}.slot m ON m.name = $1 AND m."interval" = $2 AND m.slot_start = c.noted`

// heatmapCounts counts the open rows (openRows) and the SKIP ones (from
// their partial index) of [$3, $4) in the buckets whose starts are $5 (in
// order; a bucket ends where the next starts), one row per bucket i (from
// 1) that has any; the row of bucket 0 carries lastCompleted. COMPLETE rows
// are never read: they are what is left of a bucket's slots. No clock is
// read: parked is not_before 'infinity', failed a failure count since the
// last success or re-open, whether its retry is due or not.
const heatmapCounts = `WITH o AS (` + openRows + `),
open_ AS (SELECT width_bucket(o.slot_start, $5::timestamptz[]) AS i,
		count(*) FILTER (WHERE o.status = 'ACQUIRED') AS in_flight,
		count(*) FILTER (WHERE o.status = 'AVAILABLE' AND o.fail_count > 0 AND o.not_before IS DISTINCT FROM 'infinity') AS failed,
		count(*) FILTER (WHERE o.status = 'AVAILABLE' AND o.not_before = 'infinity') AS parked,
		count(*) FILTER (WHERE o.status = 'AVAILABLE') AS available,
		min(o.slot_start) AS oldest
	FROM o GROUP BY 1),
skip_ AS (SELECT width_bucket(s.slot_start, $5::timestamptz[]) AS i, count(*) AS skipped
	FROM {{schema}}.slot s WHERE ` + inRange + ` AND s.status = 'SKIP' GROUP BY 1)
SELECT 0, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, NULL::timestamptz, ` + lastCompleted + `
UNION ALL
SELECT i, coalesce(k.skipped, 0), coalesce(p.in_flight, 0), coalesce(p.failed, 0), coalesce(p.parked, 0),
	coalesce(p.available, 0), p.oldest, NULL
FROM open_ p FULL JOIN skip_ k USING (i)`

// heatmapAllRows counts the rows of each bucket [lo, hi) by state, one row
// per bucket that has rows, in one statement: each bucket is an index
// range of the primary key, read once (for a range the stored and
// compacted ranges mostly do not cover), with the range [$3, $4)'s
// lastCompleted in every row. Missing slots are what the grid has and the
// rows do not (the caller's subtraction), so no row is ever made per slot.
// No clock is read: parked is not_before 'infinity', failed a failure count
// since the last success or re-open, whether its retry is due or not.
const heatmapAllRows = `SELECT b.i, x.stored, x.complete, x.skipped, x.in_flight, x.failed, x.parked, x.oldest, ` + lastCompleted + `
FROM unnest($5::timestamptz[], $6::timestamptz[]) WITH ORDINALITY AS b(lo, hi, i),
LATERAL (SELECT count(*) AS stored,
		count(*) FILTER (WHERE s.status = 'COMPLETE') AS complete,
		count(*) FILTER (WHERE s.status = 'SKIP') AS skipped,
		count(*) FILTER (WHERE s.status = 'ACQUIRED') AS in_flight,
		count(*) FILTER (WHERE s.status = 'AVAILABLE' AND s.fail_count > 0 AND s.not_before IS DISTINCT FROM 'infinity') AS failed,
		count(*) FILTER (WHERE s.status = 'AVAILABLE' AND s.not_before = 'infinity') AS parked,
		min(s.slot_start) FILTER (WHERE s.status IN ('AVAILABLE', 'ACQUIRED')) AS oldest
	FROM {{schema}}.slot s
	WHERE s.name = $1 AND s."interval" = $2 AND s.slot_start >= b.lo AND s.slot_start < b.hi) x
WHERE x.stored > 0
ORDER BY b.i`

const current = `SELECT status, generation, attempts, fail_count, fence, owner::text, lease_until, not_before, message,
	created_at, updated_at, completed_at
FROM {{schema}}.slot WHERE name = $1 AND "interval" = $2 AND slot_start = $3`

// history reads one slot's events from the slot_history view (history
// rows, the completions re-opens carry, and the row's own completion), each
// branch by its index on the slot, and sorts the few it finds.
const history = `SELECT at, event, generation, owner::text, fence, attempt, actor, message
FROM {{schema}}.slot_history WHERE name = $1 AND "interval" = $2 AND slot_start = $3
ORDER BY at`

// extent spans the stored slots and the compacted ranges: the start of the
// first slot, and a microsecond inside the last one (its start, or the end
// of the last compacted range less a microsecond).
const extent = `SELECT min(e.lo), max(e.hi) FROM (
	SELECT min(s.slot_start) AS lo, max(s.slot_start) AS hi FROM {{schema}}.slot s
	WHERE s.name = $1 AND s."interval" = $2
	UNION ALL
	SELECT min(c.range_start), max(c.range_end) - interval '1 microsecond' FROM {{schema}}.slot_compacted c
	WHERE c.name = $1 AND c."interval" = $2) e`

// firstSlot is the start of the series' first slot row.
const firstSlot = `SELECT min(s.slot_start) FROM {{schema}}.slot s WHERE s.name = $1 AND s."interval" = $2`

// withChanged puts the data-modifying step into a statement. A dry run puts
// in the SELECT of the rows it would change instead (its caller rolls the
// transaction back, releasing the row locks taken to find held rows).
func withChanged(sql, changed string) string {
	return strings.Replace(sql, "{{changed}}", changed, 1)
}

// rendered holds the statements rendered so far, by schema, so that the
// clients of one schema (one per series) share them; one entry per schema
// used, for the life of the process.
var rendered sync.Map // schema → *statements

// statementsFor returns the statements for schema, rendered once per
// process.
func statementsFor(schema string) *statements {
	if st, ok := rendered.Load(schema); ok {
		return st.(*statements)
	}
	st := renderStatements(schema)
	actual, _ := rendered.LoadOrStore(schema, &st)
	return actual.(*statements)
}

func renderStatements(schema string) statements {
	r := func(sql string) string { return sqlschema.Render(sql, schema) }
	return statements{
		countParts:          r(countParts),
		listParts:           r(listParts),
		insertSlots:         r(insertSlots),
		insertSlotsOrIgnore: r(insertSlots + ` ON CONFLICT DO NOTHING`),
		insertRuns:          r(insertRuns),
		insertRunsOrIgnore:  r(insertRuns + ` ON CONFLICT DO NOTHING`),
		skipSlots:           r(insertSlots + inserted),
		skipSlotsOrIgnore:   r(insertSlots + ` ON CONFLICT DO NOTHING` + inserted),
		skipRuns:            r(insertRuns + inserted),
		skipRunsOrIgnore:    r(insertRuns + ` ON CONFLICT DO NOTHING` + inserted),
		skipInserted:        r(touchInserted(`status = 'SKIP'`)),
		setActor:            setActor,
		reopen:              r(withChanged(reopen, reopenUpdate)),
		reopenDry:           r(withChanged(reopen, `SELECT 1 FROM target`)),
		retry:               r(withChanged(retrySQL, retryUpdate)),
		retryDry:            r(withChanged(retrySQL, `SELECT 1 FROM target`)),
		skip:                r(withChanged(skip, skipUpdate)),
		skipDry:             r(withChanged(skip, `SELECT 1 FROM target`)),
		current:             r(current),
		history:             r(history),
		extent:              r(extent),
		firstSlot:           r(firstSlot),
		covered:             r(coveredSQL),
		recordStored:        r(recordStoredSQL),
		lockDeletions:       r(lockDeletionsSQL),
		deletions:           r(deletionsSQL),
		compactedIn:         r(compactedInSQL),
		openCounts:          r(openCounts),
		heatmapCounts:       r(heatmapCounts),
		heatmapAllRows:      r(heatmapAllRows),
		compact:             r(compactSQL),
		compactCount:        r(compactCountSQL),
		mergeCompacted:      r(mergeCompactedSQL),
		restore:             r(restoreSQL),
		restoreSlots:        r(restoreSlotsSQL),
		restoreDownstream:   r(restoreDownstreamSQL),
		reopenInserted:      r(touchInserted(`generation = s.generation + 1`)),
		compactedCount:      r(compactedCountSQL),
		hasUpstream:         r(hasUpstreamSQL),
		waitingUpstream:     r(waitingUpstreamSQL),
		waitingOn:           r(waitingOnSQL),
	}
}
