package coverage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/almanacdev/almanac/slot"
)

// Kinds of history events (slot_event.event).
const (
	// Outcomes of a run, recorded by the worker with the run's owner,
	// fence, attempt and generation.
	eventCompleted = "completed"
	eventFailed    = "failed"
	eventParked    = "parked" // failed and gave up: AVAILABLE with not_before 'infinity'
	eventSkipped   = "skipped"
	eventSnoozed   = "snoozed"
	eventReleased  = "released" // a lease given back unfinished (shutdown)
	// (A run that lost its slot to another worker, "taken_over" or
	// "ejected", is recorded by acquire; no query here names those.)

	// Changes made by a person or a program, with its actor.
	eventReopened     = "reopened"
	eventRetried      = "retried"
	eventChangedBySQL = "changed_by_sql" // a plain SQL UPDATE made the slot AVAILABLE (not a re-open)
)

// HistoryEvent is one entry of a slot's history.
type HistoryEvent struct {
	// At is when it happened, on the database clock, in the series' zone.
	At time.Time
	// Event is its kind, as stored in slot_event.event: the outcome of a
	// run, recorded by the worker ("completed", "failed", "parked" when it
	// gave up, "skipped", "snoozed", "released" when a lease was given back
	// unfinished); a run that lost its slot to another worker
	// ("taken_over" when its lease expired, "ejected"; the message names
	// the new holder); or a change made by a person or a program, with its
	// actor ("reopened", "retried", "skipped", and "changed_by_sql" for a
	// plain SQL UPDATE that made the slot AVAILABLE without re-opening it).
	Event string
	// Generation is the slot's generation after the event.
	Generation int64
	// Owner, Fence and Attempt describe the run the event ends, when there
	// was one ("", 0 and 0 otherwise). Owner is a worker's owner id.
	Owner   string
	Fence   int64
	Attempt int
	// Actor is who asked, for changes made by a person or a program: the
	// actor of the coverage client, or for plain SQL the session's role and
	// application name (or the transaction's almanac.actor setting).
	Actor string
	// Message is the failure, the skip or re-open reason, or what happened.
	Message string
}

// Current is a slot's row as it is now.
type Current struct {
	// Status is the stored status; Parked is set for an AVAILABLE slot that
	// gave up (not_before 'infinity').
	Status string
	Parked bool
	// Generation counts the slot's computations (1 at creation, one more
	// per re-open); Attempts the acquisitions of this generation;
	// FailCount the failures since its last success or re-open.
	Generation          int64
	Attempts, FailCount int
	// Fence is the token of the latest holder (0 if never held).
	Fence int64
	// Owner and LeaseUntil describe the lease of an ACQUIRED slot ("" and
	// zero otherwise). A slot a locked-mode worker is working on stays
	// AVAILABLE: its holder is a row lock, not visible here.
	Owner      string
	LeaseUntil time.Time
	// NotBefore is when a slot in backoff becomes acquirable (zero: now or
	// never; see Parked).
	NotBefore time.Time
	// Message is the last failure, skip or re-open reason still on the row.
	Message string
	// CreatedAt, UpdatedAt and CompletedAt (zero if not COMPLETE) are the
	// row's times on the database clock.
	CreatedAt, UpdatedAt, CompletedAt time.Time
}

// History is a slot's recorded past and present.
type History struct {
	// Slot is the slot asked about.
	Slot slot.Slot
	// Current is its row now, nil when the slot has no row: missing, never
	// materialized, or compacted (see Compacted).
	Current *Current
	// Compacted describes the compacted run the slot lies in (see
	// Compact), nil if none: the slot is finished, its row deleted.
	Compacted *Compacted
	// Events are its recorded events, oldest first. Events older than the
	// schema's history retention have been pruned (see PruneHistory).
	Events []HistoryEvent
}

// Compacted is what is kept of a compacted slot: the state of its run
// (compacted slots of one state), the run's highest generation and latest
// completion.
type Compacted struct {
	// Status is statusComplete or statusSkip.
	Status string
	// Generation is the highest generation among the run's slots;
	// CompletedAt the latest completion time among them (zero for SKIP).
	Generation  int64
	CompletedAt time.Time
}

// History returns the history of the slot that contains t: its row as it
// is now and its recorded events, oldest first, read in one snapshot. A
// slot is recorded when a worker finishes a run of it (completed, failed,
// parked, skipped, snoozed, released), when a run loses it (taken over,
// ejected), and when it is re-opened, retried or skipped by an operation,
// including plain SQL; a claim is not recorded (the holder of a lease is
// on the row), nor is creation (Current.CreatedAt). A completion is kept
// on the slot's row until a re-open carries it into its own event; it is
// listed here either way, as a "completed" event. A compacted slot has lost
// its row, and with it the completion of its last computation (Compacted
// keeps the run's latest completion time). The events are found through a
// block-range index on the history (migration 006), which its writers do
// not pay for as it grows: the lookup reads the runs of pages whose starts
// span the slot's and those not summarized yet (VACUUM summarizes them, and
// autovacuum runs on the history every 100,000 events, at most once a
// minute), about 12 ms per 10M events kept, plus that tail. Errors for a time off the grid's range wrap slot.ErrInvalid.
func (c *Client) History(ctx context.Context, t time.Time) (History, error) {
	sl, err := c.grid.Floor(t)
	if err != nil {
		return History{}, err
	}
	h := History{Slot: sl}
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		var cur Current
		var owner, message *string
		var lease, notBefore, completed pgtype.Timestamptz
		err := tx.QueryRow(ctx, c.sql.current, c.name, c.interval, sl.Start).Scan(&cur.Status, &cur.Generation, &cur.Attempts,
			&cur.FailCount, &cur.Fence, &owner, &lease, &notBefore, &message, &cur.CreatedAt, &cur.UpdatedAt, &completed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			cs, err := c.compactedAt(ctx, tx, sl.Start)
			if err != nil {
				return err
			}
			h.Compacted = cs
		case err != nil:
			return err
		default:
			cur.Owner, cur.Message = deref(owner), deref(message)
			cur.Parked = notBefore.InfinityModifier == pgtype.Infinity
			cur.LeaseUntil, cur.NotBefore, cur.CompletedAt = c.inZone(lease), c.inZone(notBefore), c.inZone(completed)
			cur.CreatedAt, cur.UpdatedAt = cur.CreatedAt.In(c.grid.Location()), cur.UpdatedAt.In(c.grid.Location())
			h.Current = &cur
		}
		rows, err := tx.Query(ctx, c.sql.history, c.name, c.interval, sl.Start)
		if err != nil {
			return err
		}
		var e HistoryEvent
		var fence *int64
		var attempt *int
		var actor *string
		_, err = pgx.ForEachRow(rows, []any{&e.At, &e.Event, &e.Generation, &owner, &fence, &attempt, &actor, &message}, func() error {
			ev := e
			ev.At = e.At.In(c.grid.Location())
			ev.Owner, ev.Actor, ev.Message = deref(owner), deref(actor), deref(message)
			if fence != nil {
				ev.Fence = *fence
			}
			if attempt != nil {
				ev.Attempt = *attempt
			}
			h.Events = append(h.Events, ev)
			return nil
		})
		return err
	})
	if err != nil {
		return History{}, fmt.Errorf("history of %s: %w", sl, err)
	}
	return h, nil
}

// compactedAt returns the compacted run holding the slot starting at t,
// nil if none.
func (c *Client) compactedAt(ctx context.Context, tx pgx.Tx, t time.Time) (*Compacted, error) {
	cs, err := c.compactedIn(ctx, tx, t, t.Add(time.Microsecond))
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	s := cs[0]
	out := &Compacted{Status: s.status, Generation: s.generation}
	if s.completedAt != nil {
		out.CompletedAt = s.completedAt.In(c.grid.Location())
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
