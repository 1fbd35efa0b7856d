package coverage

// Slot statuses, as stored in the status column.
const (
	statusAvailable = "AVAILABLE"
	statusAcquired  = "ACQUIRED"
	statusComplete  = "COMPLETE"
	statusSkip      = "SKIP"
)

// WriteOptions tune the operations that write a range of slots
// (Materialize, Reopen, Skip, Retry, Compact) and PruneHistory. The zero
// value writes, with the defaults below; an operation ignores the fields
// that are not its own.
type WriteOptions struct {
	// Reason says why. Reopen and Skip store it in the message and the
	// history of every slot they change (default "reopened" and
	// "skipped"). Given to Materialize, it inserts the missing slots as
	// SKIP with that message instead of AVAILABLE, and wakes no one: a
	// catch-up policy that gives up on slots missed during downtime keeps
	// the hole visible this way (existing slots are left alone, as always;
	// Skip skips those too). It must be valid UTF-8 of at most 1 KiB,
	// without control characters but tab and newline, nor invisible ones;
	// errors for it wrap ErrInvalid and nothing is written.
	Reason string
	// DryRun reports what the operation would do, and changes nothing.
	DryRun bool
	// Progress, if set, is called after each chunk with how many of the
	// range's slots have been dealt with so far and how many the range
	// holds. It runs on the caller's goroutine and should return quickly.
	Progress func(done, total int64)
	// States are the statuses Reopen re-opens: "COMPLETE", "SKIP" or both.
	// Default both.
	States []string
	// Parked makes Reopen re-open parked slots too (AVAILABLE with
	// not_before 'infinity': they gave up after their maximum attempts),
	// giving them a fresh set of attempts.
	Parked bool
}

// WriteResult says what a write over a range did; with DryRun, what it
// would do. Each operation fills the counts that concern it.
type WriteResult struct {
	// Slots is the number of the grid's slots in the range (Materialize).
	Slots int64
	// Changed counts the slots written: inserted (Materialize), made
	// AVAILABLE again (Reopen), marked SKIP, missing ones inserted as SKIP
	// included (Skip), made acquirable now (Retry), deleted into compacted
	// ranges (Compact). Of Materialize's Slots, Slots - Changed existed
	// already, or were inserted by a concurrent call.
	Changed int64
	// Inserted counts the slots among Changed that had no row
	// (Materialize, Skip).
	Inserted int64
	// Unparked counts the parked slots among Changed (Retry).
	Unparked int64
	// Complete and AlreadySkipped count the finished slots Skip left
	// alone: COMPLETE ones, and ones that were SKIP already (their message
	// is kept).
	Complete, AlreadySkipped int64
	// Ranges is the number of compacted ranges the series has afterwards:
	// the rows of the slot_compacted table that stand for the deleted ones
	// (Compact; 0 with DryRun).
	Ranges int64
	// Held lists, in slot order, the slots of the range that workers held
	// and that were therefore left alone (Reopen, Skip, Retry): ACQUIRED
	// ones, and rows another transaction had locked (a locked-mode worker).
	// Re-open those once they are done if their work must see the new data.
	Held []Held
}
