package wake

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// NotWaiting is the condition on an AVAILABLE row of the slot table that
// it is not waiting: not in a retry or snooze backoff, and not parked
// (not_before 'infinity'). Acquisition (acquire's candidates) and Ready
// both use it, so that a series Ready names has a slot a claim takes.
const NotWaiting = `(not_before IS NULL OR not_before <= clock_timestamp())`

// Expired is the condition on an ACQUIRED row of the slot table that its
// lease may be taken over: expired for grace (an SQL expression of
// microseconds), and the server up for as long (see acquire's candidates
// for why both, and why now()). Acquisition and Ready both use it.
func Expired(grace string) string {
	return `lease_until < now() - ` + grace + ` * interval '1 microsecond'
      AND pg_postmaster_start_time() < now() - ` + grace + ` * interval '1 microsecond'`
}

// readySQL finds the series of a schema that have acquirable slots, in one
// statement whose cost grows with the series that have open or held slots,
// not with the series registered nor with their slots: a loose scan of
// slot_available_idx and of slot_acquired_idx (one descent per series that
// has an entry there, skipping from one series to the next), then for each
// series found one probe for its first acquirable slot. A series whose
// AVAILABLE slots are all waiting (a retry backoff, a snooze, parked) or
// not due yet, and one whose leases have not expired, is not named.
//
// The probe of AVAILABLE slots is ordered by slot_start NULLS FIRST, the
// order of slot_available_idx only (see acquire's candidates), and bounded
// by slot_start against now(), stable, so that the bound ends the index
// scan: it reads that index from the series' first entry and stops at the
// first slot not waiting, which decides whether the series has one due (a
// later one ends later). It steps over the slots of the series that wait
// ahead of it (in a retry backoff, snoozed, parked): those cost a row each
// per scan. The probe of leases reads slot_acquired_idx in expiry order,
// the first entry deciding.
//
// $1 is the smallest lag of the caller's jobs and $2 the smallest takeover
// grace (microseconds): a job with a larger one may be named a little
// early, and its claim then finds nothing, which costs a statement and
// misses no slot.
//
// A paused series (series.paused_at) is not named, for open slots nor for
// expired leases: its claims take nothing, and Resume notifies the workers.
// A slot is due by the larger of $1 and the series' stored lag, as the
// claim has it. A series whose due slot waits for an upstream series, or
// that is at its cap (max_in_flight), is still named: the claim decides,
// costing one statement per poll, and naming it is what finds the slot
// once the upstream finishes or a permit frees.
var readySQL = `WITH RECURSIVE open AS (
    (SELECT name, "interval" FROM {{schema}}.slot WHERE status = 'AVAILABLE'
        ORDER BY name, "interval", slot_start NULLS FIRST LIMIT 1)
    UNION ALL
    SELECT n.name, n."interval" FROM open AS o CROSS JOIN LATERAL (
        SELECT name, "interval" FROM {{schema}}.slot
        WHERE status = 'AVAILABLE' AND (name, "interval") > (o.name, o."interval")
        ORDER BY name, "interval", slot_start NULLS FIRST LIMIT 1) AS n
),
held AS (
    (SELECT name, "interval" FROM {{schema}}.slot WHERE status = 'ACQUIRED'
        ORDER BY name, "interval", lease_until LIMIT 1)
    UNION ALL
    SELECT n.name, n."interval" FROM held AS h CROSS JOIN LATERAL (
        SELECT name, "interval" FROM {{schema}}.slot
        WHERE status = 'ACQUIRED' AND (name, "interval") > (h.name, h."interval")
        ORDER BY name, "interval", lease_until LIMIT 1) AS n
)
SELECT o.name, o."interval" FROM open AS o
LEFT JOIN {{schema}}.series AS r ON r.name = o.name AND r."interval" = o."interval"
CROSS JOIN LATERAL (
    SELECT slot_end FROM {{schema}}.slot AS s
    WHERE s.name = o.name AND s."interval" = o."interval" AND s.status = 'AVAILABLE' AND ` + NotWaiting + `
      AND s.slot_start < now() - $1 * interval '1 microsecond'
    ORDER BY s.slot_start NULLS FIRST LIMIT 1) AS f
WHERE r.paused_at IS NULL
  AND f.slot_end <= clock_timestamp() - greatest($1 * interval '1 microsecond', coalesce(r.lag, interval '0'))
UNION
SELECT h.name, h."interval" FROM held AS h
LEFT JOIN {{schema}}.series AS r ON r.name = h.name AND r."interval" = h."interval"
CROSS JOIN LATERAL (
    SELECT FROM {{schema}}.slot AS s
    WHERE s.name = h.name AND s."interval" = h."interval" AND s.status = 'ACQUIRED'
      AND ` + Expired("$2") + `
    ORDER BY s.lease_until LIMIT 1) AS e
WHERE r.paused_at IS NULL`

// Key names a series: its name and its interval's canonical text.
type Key struct{ Name, Interval string }

// Querier is what Ready needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Ready returns the series of schema that have acquirable slots now, on the
// database clock: AVAILABLE slots due with lag and not waiting, or leases
// expired for grace. One statement, retried across transient faults until
// ctx ends.
func Ready(ctx context.Context, db Querier, schema string, lag, grace time.Duration) ([]Key, error) {
	sql := readySQLFor(schema)
	var out []Key
	err := retry.Do(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := db.Query(ctx, sql, lag.Microseconds(), grace.Microseconds())
		if err != nil {
			return err
		}
		var k Key
		_, err = pgx.ForEachRow(rows, []any{&k.Name, &k.Interval}, func() error {
			out = append(out, k)
			return nil
		})
		return err
	})
	return out, err
}

// readySQLFor renders readySQL for schema.
func readySQLFor(schema string) string {
	return strings.TrimSpace(sqlschema.Render(readySQL, schema))
}
