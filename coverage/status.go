package coverage

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Counts are the slots of a range by state.
type Counts struct {
	// Complete and Skip count the finished slots.
	Complete, Skip int64
	// Available counts the slots acquirable now: AVAILABLE, neither in
	// backoff nor parked. It includes the slots locked-mode workers are
	// working on, which stay AVAILABLE until they finish: a row lock is
	// invisible to a read that does not try to take it.
	Available int64
	// Backoff counts AVAILABLE slots that failed and wait for a retry
	// (not_before in the future, by the database clock); Parked those that
	// gave up (not_before 'infinity').
	Backoff, Parked int64
	// WaitingUpstream counts the Available slots that wait for an upstream
	// series (see almanac.SeriesOptions.After): some upstream slot
	// overlapping them is not COMPLETE or SKIP yet, or has no row. 0 for a
	// series without dependencies.
	WaitingUpstream int64
	// WaitingOn lists what the first waiting slots wait on, at most 20
	// entries, oldest waiting slot first, then by upstream series and
	// start: each upstream slot overlapping one that is not COMPLETE or
	// SKIP (Status AVAILABLE, with Parked and the failure in Message, or
	// ACQUIRED), and each part of its span that has no upstream row
	// (Status MISSING, Start and End the part's bounds). Waiting is the
	// waiting slot's start, Name and Interval the upstream series. Nil
	// when no slot waits.
	WaitingOn []Note
	// Acquired counts the slots held under a lease, LeaseExpired those of
	// them whose lease ran out (their holder is gone or late; any worker may
	// take them over).
	Acquired, LeaseExpired int64
	// OldestOpen is the start of the first slot not finished (AVAILABLE or
	// ACQUIRED), zero if none.
	OldestOpen time.Time
	// LastCompleted is the latest completion time of the range's COMPLETE
	// slots, zero if none.
	LastCompleted time.Time
	// LastNote is the most recently written message among the range's
	// open slots (AVAILABLE or ACQUIRED): the last failure, parking or
	// re-open reason still standing, the likeliest explanation of what is
	// not done yet. Nil when none of them has a message. Skip reasons are
	// left out: a catch-up policy can skip millions of slots, which would
	// all have to be sorted.
	LastNote *Note
}

// Note is the message a slot carries and the slot's state: in
// Counts.LastNote a slot of the series, in Counts.WaitingOn an upstream
// slot that a slot of the series waits for.
type Note struct {
	// Start is the slot's start, End its end (set in WaitingOn only), in
	// the series' zone.
	Start, End time.Time
	// Name and Interval name the upstream series in WaitingOn ("" in
	// LastNote); Waiting is the start of the slot of the series that
	// waits for this one (zero in LastNote).
	Name, Interval string
	Waiting        time.Time
	// Status is the slot's status (MISSING for a part of an upstream's
	// range without a row); Parked is set for an AVAILABLE slot that gave
	// up.
	Status string
	Parked bool
	// Message is the failure, skip or re-open reason.
	Message string
	// At is when the slot row was last written (database clock), in the
	// series' zone; zero for MISSING.
	At time.Time
}

// Status summarizes the coverage of a range.
type Status struct {
	// From and To are the range, Slots the number of slots its grid holds.
	From, To time.Time
	Slots    int64
	Counts
	// Missing is the number of due slots without a row (compacted slots
	// are not missing), in Gaps maximal runs; FirstMissing is the start of
	// the first, zero if none.
	Missing, Gaps int64
	FirstMissing  time.Time
	// NotDue is the number of slots without a row that are not due yet
	// (they start at or after Due): they are not missing, and no report
	// fails on them.
	NotDue int64
	// Due is the start of the series' first slot not due yet when the
	// status was read (its end plus the series' lag has not passed on the database clock), in the series' zone.
	Due time.Time
}

// Covered returns the percentage of the range's slots that are finished
// (COMPLETE or SKIP), 100 for an empty range.
func (s Status) Covered() float64 {
	if s.Slots == 0 {
		return 100
	}
	return float64(s.Complete+s.Skip) * 100 / float64(s.Slots)
}

// Status summarizes [from, to): the slots by state (Counts), the missing
// ones (Gaps) and the share finished, all read from one snapshot. Errors
// for an invalid range wrap slot.ErrInvalid.
//
// It costs O(gaps + open slots), not O(slots): finished rows are never
// read. Open (AVAILABLE, ACQUIRED) and SKIP slots are counted from their
// partial indexes, missing ones by the gap search, which skips stored and
// compacted ranges (see Gaps), and COMPLETE ones are what is left of the
// grid's slots:
//
//	Complete = Slots - Missing - NotDue - open - SKIP
//
// Compacted slots (see Compact) count as COMPLETE or SKIP, as they were.
// The counts are of the grid's slots: a row whose start is not a boundary
// of the grid (written by another tool) is counted only when open or
// skipped. LastCompleted is the latest completion time of the range's
// COMPLETE slots, stored or compacted (whichever slot completed last, not
// the newest by start); it reads the range's COMPLETE rows, which
// compaction keeps few.
func (c *Client) Status(ctx context.Context, from, to time.Time) (Status, error) {
	from, to, total, err := c.checkRange(from, to)
	if err != nil {
		return Status{}, err
	}
	var st Status
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		st = Status{From: from.In(c.grid.Location()), To: to.In(c.grid.Location()), Slots: total}
		return c.status(ctx, tx, &st)
	})
	if err != nil {
		return Status{}, err
	}
	return st, nil
}

// status fills st, whose range and slot count are set, in tx's snapshot.
func (c *Client) status(ctx context.Context, tx pgx.Tx, st *Status) error {
	from, to := st.From, st.To
	gaps, err := c.missingIn(ctx, tx, part{from, to, st.Slots})
	if err != nil {
		return err
	}
	if st.Due, err = c.dueIn(ctx, tx); err != nil {
		return err
	}
	gaps, st.NotDue = c.splitDue(gaps, st.Due)
	for _, g := range gaps {
		st.Missing += g.Slots
	}
	if st.Gaps = int64(len(gaps)); st.Gaps > 0 {
		st.FirstMissing = gaps[0].Start
	}
	n := &st.Counts
	var oldest, last, noted, notedAt pgtype.Timestamptz
	var status, message *string
	var parked *bool
	var skipRows int64
	if err := tx.QueryRow(ctx, c.sql.openCounts, planned(c.name, c.interval, from, to)...).Scan(
		&n.Available, &n.Backoff, &n.Parked, &n.Acquired, &n.LeaseExpired, &skipRows, &oldest, &last,
		&noted, &status, &parked, &message, &notedAt); err != nil {
		return err
	}
	n.OldestOpen, n.LastCompleted = c.inZone(oldest), c.inZone(last)
	if noted.Valid && status != nil {
		n.LastNote = &Note{Start: c.inZone(noted), Status: *status, Parked: deref(parked), Message: deref(message), At: c.inZone(notedAt)}
	}
	var deps bool
	if err := tx.QueryRow(ctx, c.sql.hasUpstream, c.name, c.interval).Scan(&deps); err != nil {
		return err
	}
	if deps {
		if err := tx.QueryRow(ctx, c.sql.waitingUpstream, planned(c.name, c.interval, from, to)...).Scan(&n.WaitingUpstream); err != nil {
			return err
		}
		if n.WaitingUpstream > 0 {
			if n.WaitingOn, err = c.waitingOn(ctx, tx, from, to); err != nil {
				return err
			}
		}
	}
	compacted, err := c.compactedIn(ctx, tx, from, to)
	if err != nil {
		return err
	}
	n.Skip = skipRows
	for _, s := range compacted {
		if s.status == statusSkip {
			k, _ := c.grid.Count(s.lo, s.hi) // within a validated range
			n.Skip += k
		}
		if s.completedAt != nil && s.completedAt.After(n.LastCompleted) {
			n.LastCompleted = s.completedAt.In(c.grid.Location())
		}
	}
	n.Complete = max(0, st.Slots-st.Missing-st.NotDue-n.Available-n.Backoff-n.Parked-n.Acquired-n.Skip)
	return nil
}

// maxWaitingOn bounds Counts.WaitingOn.
const maxWaitingOn = 20

// waitingOn reads Counts.WaitingOn for [from, to) in tx's snapshot.
func (c *Client) waitingOn(ctx context.Context, tx pgx.Tx, from, to time.Time) ([]Note, error) {
	rows, err := tx.Query(ctx, c.sql.waitingOn, planned(c.name, c.interval, from, to, maxWaitingOn)...)
	if err != nil {
		return nil, err
	}
	var out []Note
	var waiting, lo, hi, at pgtype.Timestamptz
	var n Note
	var parked *bool
	var message *string
	_, err = pgx.ForEachRow(rows, []any{&waiting, &n.Name, &n.Interval, &lo, &hi, &n.Status, &parked, &message, &at}, func() error {
		n.Waiting, n.Start, n.End, n.At = c.inZone(waiting), c.inZone(lo), c.inZone(hi), c.inZone(at)
		n.Parked, n.Message = deref(parked), deref(message)
		out = append(out, n)
		return nil
	})
	return out, err
}

// missingIn returns the gaps of p, in order and merged across the gap
// search's windows, read in tx's snapshot.
func (c *Client) missingIn(ctx context.Context, tx pgx.Tx, p part) ([]Gap, error) {
	var gaps []Gap
	for w := range splitRange(c.grid, p, ceilDiv(p.want, windowSize)) {
		found, err := c.searchGaps(ctx, tx, w)
		if err != nil {
			return nil, err
		}
		if n := len(gaps); n > 0 && len(found) > 0 && gaps[n-1].End.Equal(found[0].Start) {
			gaps[n-1].End, gaps[n-1].Slots = found[0].End, gaps[n-1].Slots+found[0].Slots
			found = found[1:]
		}
		gaps = append(gaps, found...)
	}
	return gaps, nil
}

// Extent returns the range from the first stored slot's start to the last
// one's end on the grid, compacted slots included; ok is false when the
// series has no slots.
func (c *Client) Extent(ctx context.Context) (from, to time.Time, ok bool, err error) {
	var first, last pgtype.Timestamptz
	err = c.inSnapshot(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, c.sql.extent, c.name, c.interval).Scan(&first, &last)
	})
	if err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	if !first.Valid {
		return time.Time{}, time.Time{}, false, nil
	}
	end, err := c.grid.Floor(last.Time)
	if err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	return first.Time.In(c.grid.Location()), end.End, true, nil
}

// inZone returns a nullable timestamp in the series' zone, zero for NULL.
func (c *Client) inZone(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time.In(c.grid.Location())
}
