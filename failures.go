package almanac

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/safetext"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// maxFailureMessage bounds the message of a Failure, in bytes.
const maxFailureMessage = 500

// FailuresOptions select the failed and parked slots Client.Failures
// lists. The zero value lists those of every series.
type FailuresOptions struct {
	// Name, if not empty, keeps the slots of the series of that name; with
	// Interval (its text, e.g. PT5M) too, of that one series only.
	Name, Interval string
	// From and To, if not zero, keep the slots starting in [From, To).
	From, To time.Time
	// Limit caps the slots listed. Default 1000.
	Limit int
	// Latest lists the latest failure first, instead of in order of series
	// and slot.
	Latest bool
}

// Failure is a slot whose last run failed: it waits for a retry, or it gave
// up (Parked) and waits for a person.
type Failure struct {
	// Name and Interval identify the series.
	Name, Interval string
	// Start and End bound the slot, in the series' zone.
	Start, End time.Time
	// Parked is set when the slot gave up after its attempts (see
	// Policy.MaxAttempts); Client.Retry or Reopen gives it another chance.
	Parked bool
	// Attempts counts the acquisitions of the slot's generation,
	// FailCount its failures since its last success or re-open.
	Attempts, FailCount int
	// Message is the last failure's text, at most 500 bytes of printable
	// text.
	Message string
	// NotBefore is when a slot in backoff becomes acquirable again (zero
	// when due now, or parked).
	NotBefore time.Time
	// At is when the failure was recorded (database clock), in the
	// series' zone.
	At time.Time
}

// failuresSQL lists failed and parked slots, {{series}} naming which
// series and {{order}} in which order. The rows come from the partial index
// on AVAILABLE slots (name, interval, slot_start): the work grows with the
// open slots of the series in range, never with the finished ones. Slots
// being worked on (ACQUIRED) are left out: their outcome is pending.
const failuresSQL = `SELECT x.name, x."interval", s.time_zone, x.slot_start, x.slot_end, x.attempts, x.fail_count,
    x.not_before, x.message, x.updated_at
FROM {{schema}}.slot x
JOIN {{schema}}.series s ON s.name = x.name AND s."interval" = x."interval"
WHERE x.status = 'AVAILABLE' AND x.fail_count > 0
  AND x.slot_start >= $1 AND x.slot_start < $2{{series}}
ORDER BY {{order}}
LIMIT $3`

// Failures lists the slots whose last run failed, waiting for a retry or
// parked, of every series (or of the one opts names), in order of series
// and slot (or the latest failure first, with opts.Latest): at most
// opts.Limit of them, with whether more matched. Its cost grows with the
// unfinished slots in range, not the finished ones. Slots being worked on
// are left out: their outcome is pending. Errors for an empty range, or an
// Interval without a Name, wrap ErrInvalid.
func (c *Client) Failures(ctx context.Context, opts FailuresOptions) ([]Failure, bool, error) {
	if opts.Name != "" {
		if err := input.CheckName(opts.Name); err != nil {
			return nil, false, err
		}
	}
	if opts.Limit <= 0 {
		opts.Limit = defaults.FailuresLimit
	}
	from, to := opts.From, opts.To
	if from.IsZero() {
		from = slot.MinTime()
	}
	if to.IsZero() {
		to = slot.MaxTime()
	}
	if !from.Before(to) {
		return nil, false, fmt.Errorf("%w: from %s is not before to %s", ErrInvalid, slot.FormatTime(from), slot.FormatTime(to))
	}
	args := []any{from, to, opts.Limit + 1}
	var series string
	switch {
	case opts.Interval != "" && opts.Name == "":
		return nil, false, fmt.Errorf("%w: failures of interval %q: name the series too", ErrInvalid, opts.Interval)
	case opts.Interval != "":
		series, args = ` AND x.name = $4 AND x."interval" = $5`, append(args, opts.Name, opts.Interval)
	case opts.Name != "":
		series, args = ` AND x.name = $4`, append(args, opts.Name)
	}
	order := `x.name, x."interval", x.slot_start`
	if opts.Latest {
		order = `x.updated_at DESC, ` + order
	}
	sql := strings.NewReplacer("{{series}}", series, "{{order}}", order).Replace(sqlschema.Render(failuresSQL, c.opts.Schema))
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return nil, false, err
	}

	zones := map[string]*time.Location{}
	var out []Failure
	var f Failure
	var zone string
	var notBefore pgtype.Timestamptz
	var message *string
	err := retry.Do(ctx, func(ctx context.Context) error {
		return readOnly(ctx, c.pool, func(tx pgx.Tx) error {
			out = out[:0]
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			_, err = pgx.ForEachRow(rows, []any{&f.Name, &f.Interval, &zone, &f.Start, &f.End, &f.Attempts, &f.FailCount, &notBefore, &message, &f.At},
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
					g.Start, g.End, g.At = f.Start.In(loc), f.End.In(loc), f.At.In(loc)
					g.Parked = notBefore.InfinityModifier == pgtype.Infinity
					g.NotBefore = time.Time{}
					if notBefore.Valid && notBefore.InfinityModifier == pgtype.Finite {
						g.NotBefore = notBefore.Time.In(loc)
					}
					g.Message = ""
					if message != nil {
						g.Message = safetext.Head(*message, maxFailureMessage)
					}
					out = append(out, g)
					return nil
				})
			return err
		})
	})
	if err != nil {
		return nil, false, err
	}
	more := len(out) > opts.Limit
	if more {
		out = out[:opts.Limit]
	}
	return out, more, nil
}
