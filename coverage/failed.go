package coverage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/sqlschema"
)

// FailedSlot is a slot whose last run failed: it waits for a retry, or it
// gave up (Parked) and waits for a person.
type FailedSlot struct {
	// Start and End bound the slot, in the series' zone.
	Start, End time.Time
	// Parked is set when the slot gave up (see Client.Retry).
	Parked bool
	// Attempts counts the acquisitions of the slot's generation,
	// FailCount its failures since its last success or re-open.
	Attempts, FailCount int
	// Message is the last failure's text (bounded by the slot table).
	Message string
	// NotBefore is when a slot in backoff becomes acquirable again (zero
	// when due now, or parked).
	NotBefore time.Time
	// At is when the failure was recorded (database clock), in the
	// series' zone.
	At time.Time
}

// MaxFailedSlots bounds the limit of FailedSlots.
const MaxFailedSlots = 1000

// failedSQL lists the failed slots of [$3, $4), latest failure first. The
// partial index on AVAILABLE slots finds them without reading the finished
// ones.
const failedSQL = `SELECT s.slot_start, s.slot_end, s.not_before IS NOT DISTINCT FROM 'infinity', s.attempts, s.fail_count,
	coalesce(s.message, ''), s.not_before, s.updated_at
FROM {{schema}}.slot s
WHERE ` + inRange + ` AND s.status = 'AVAILABLE' AND s.fail_count > 0
ORDER BY s.updated_at DESC, s.slot_start
LIMIT $5`

// FailedSlots returns up to limit (1 to MaxFailedSlots) failed and parked
// slots of [from, to), the latest failure first. Its cost grows with the
// range's unfinished slots, not its finished ones. Errors for an invalid
// range or limit wrap slot.ErrInvalid.
func (c *Client) FailedSlots(ctx context.Context, from, to time.Time, limit int) ([]FailedSlot, error) {
	if limit < 1 || limit > MaxFailedSlots {
		return nil, input.Kind(fmt.Sprintf("failed slots limit %d: expected 1 to %d", limit, MaxFailedSlots))
	}
	from, to, _, err := c.checkRange(from, to)
	if err != nil {
		return nil, err
	}
	var out []FailedSlot
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, sqlschema.Render(failedSQL, c.schema), c.name, c.interval, from, to, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var f FailedSlot
			var notBefore, at pgtype.Timestamptz
			if err := rows.Scan(&f.Start, &f.End, &f.Parked, &f.Attempts, &f.FailCount, &f.Message, &notBefore, &at); err != nil {
				return err
			}
			f.Start, f.End = f.Start.In(c.grid.Location()), f.End.In(c.grid.Location())
			f.NotBefore, f.At = c.inZone(notBefore), c.inZone(at)
			out = append(out, f)
		}
		return rows.Err()
	})
	return out, err
}
