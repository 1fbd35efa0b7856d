package coverage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/safetext"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// DefaultFailuresLimit is the default of FailuresQuery.Limit.
const DefaultFailuresLimit = 1000

// MaxFailureMessage bounds the message of a Failure, in bytes.
const MaxFailureMessage = 500

// FailuresQuery selects the failed and parked slots Failures lists.
type FailuresQuery struct {
	// Name, if not empty, keeps the slots of the series of that name (any
	// interval).
	Name string
	// From and To, if not zero, keep the slots starting in [From, To).
	From, To time.Time
	// Limit caps the slots listed. Default DefaultFailuresLimit.
	Limit int
}

// Failure is a failed or parked slot of any series: the series, and the
// slot as FailedSlot describes it (its Message at most MaxFailureMessage
// bytes of printable text).
type Failure struct {
	// Name and Interval identify the series.
	Name, Interval string
	FailedSlot
}

// failures lists failed and parked slots. The rows come from the partial
// index on AVAILABLE slots (name, interval, slot_start): the work grows with
// the open slots of the series in range, never with the finished ones.
// Slots being worked on (ACQUIRED) are left out: their outcome is pending.
const failures = `SELECT x.name, x."interval", s.time_zone, x.slot_start, x.slot_end, x.attempts, x.fail_count,
    x.not_before, x.message, x.updated_at
FROM {{schema}}.slot x
JOIN {{schema}}.series s ON s.name = x.name AND s."interval" = x."interval"
WHERE x.status = 'AVAILABLE' AND x.fail_count > 0
  AND ($1::text IS NULL OR x.name = $1)
  AND x.slot_start >= $2 AND x.slot_start < $3
ORDER BY x.name, x."interval", x.slot_start
LIMIT $4`

// Failures lists the failed and parked slots of every series in schema (or
// of q.Name's), in order of series and slot, at most q.Limit of them. It
// reports whether more matched than were listed.
func Failures(ctx context.Context, db DB, schema string, q FailuresQuery) ([]Failure, bool, error) {
	if schema == "" {
		schema = sqlschema.Default
	}
	if err := sqlschema.Check(schema); err != nil {
		return nil, false, err
	}
	if q.Limit <= 0 {
		q.Limit = DefaultFailuresLimit
	}
	from, to := q.From, q.To
	if from.IsZero() {
		from = slot.MinTime()
	}
	if to.IsZero() {
		to = slot.MaxTime()
	}
	if !from.Before(to) {
		return nil, false, fmt.Errorf("%w: from %s is not before to %s", slot.ErrInvalid, slot.FormatTime(from), slot.FormatTime(to))
	}
	var name *string
	if q.Name != "" {
		name = &q.Name
	}
	zones := map[string]*time.Location{}
	var out []Failure
	var f Failure
	var zone, ivText string
	var start, end time.Time
	var notBefore pgtype.Timestamptz
	var message *string
	err := readOnly(ctx, db, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, sqlschema.Render(failures, schema), name, from, to, q.Limit+1)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&f.Name, &ivText, &zone, &start, &end, &f.Attempts, &f.FailCount, &notBefore, &message, &f.At},
			func() error {
				loc, ok := zones[zone]
				if !ok {
					var err error
					if loc, err = slot.LoadZone(zone); err != nil {
						return err
					}
					zones[zone] = loc
				}
				g := f
				g.Interval = ivText
				g.Start, g.End = start.In(loc), end.In(loc)
				g.Parked = notBefore.InfinityModifier == pgtype.Infinity
				g.NotBefore = time.Time{}
				if notBefore.Valid && notBefore.InfinityModifier == pgtype.Finite {
					g.NotBefore = notBefore.Time.In(loc)
				}
				g.Message = ""
				if message != nil {
					g.Message = safetext.Head(*message, MaxFailureMessage)
				}
				g.At = f.At.In(loc)
				out = append(out, g)
				return nil
			})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	more := len(out) > q.Limit
	if more {
		out = out[:q.Limit]
	}
	return out, more, nil
}
