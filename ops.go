package almanac

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/input"
)

// Coverage operations. Each works on one registered series over a
// half-open range [from, to), retries transient faults within
// Options.RetryBudget, and records what it changes in the slots' history
// as done by Options.Actor. The Tx variants work inside the caller's
// transaction instead (see MaterializeTx).

// Gap is a maximal run of missing slots.
type Gap = coverage.Gap

// Status summarizes a range: slots by state, missing ones, share finished,
// oldest open slot, last completion, last note.
type Status = coverage.Status

// Counts are the stored slots of a range by state.
type Counts = coverage.Counts

// Held is a slot an operation left alone because a worker holds it.
type Held = coverage.Held

// ProgressFunc is told, after each chunk of an operation, how many of the
// range's slots are done and how many it holds.
type ProgressFunc = coverage.ProgressFunc

// Options and results of the writing operations.
type (
	MaterializeOptions = coverage.MaterializeOptions
	MaterializeResult  = coverage.MaterializeResult
	ReopenOptions      = coverage.ReopenOptions
	ReopenResult       = coverage.ReopenResult
	SkipOptions        = coverage.SkipOptions
	SkipResult         = coverage.SkipResult
	RetryOptions       = coverage.RetryOptions
	RetryResult        = coverage.RetryResult
)

// History is a slot's record: its current state and its events, oldest
// first.
type History = coverage.History

// HistoryEvent is one event of a slot's history.
type HistoryEvent = coverage.Event

// The stored statuses of a slot.
const (
	StatusAvailable = coverage.StatusAvailable
	StatusAcquired  = coverage.StatusAcquired
	StatusComplete  = coverage.StatusComplete
	StatusSkip      = coverage.StatusSkip
)

// Gaps returns the missing slots of [from, to) as maximal runs, in order.
// Memory is O(gaps).
func (c *Client) Gaps(ctx context.Context, s Series, from, to time.Time) ([]Gap, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return nil, err
	}
	var out []Gap
	for g, err := range cov.Gaps(ctx, from, to) {
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// Counts returns the stored slots of [from, to) by state, without looking
// for missing ones (see Gaps and Status).
func (c *Client) Counts(ctx context.Context, s Series, from, to time.Time) (Counts, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return Counts{}, err
	}
	return cov.Counts(ctx, from, to)
}

// Extent returns the range from the series' first stored slot's start to
// its last one's end, compacted slots included; ok is false when the
// series has no slots.
func (c *Client) Extent(ctx context.Context, s Series) (from, to time.Time, ok bool, err error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return from, to, false, err
	}
	return cov.Extent(ctx)
}

// Status summarizes [from, to): slots by state, missing ones, share
// finished, oldest open slot, last completion.
func (c *Client) Status(ctx context.Context, s Series, from, to time.Time) (Status, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return Status{}, err
	}
	return cov.Status(ctx, from, to)
}

// Materialize inserts the missing slots of [from, to) as AVAILABLE (or SKIP
// with opts.SkipReason) and wakes idle workers. It is idempotent and safe
// from any number of processes at once.
func (c *Client) Materialize(ctx context.Context, s Series, from, to time.Time, opts MaterializeOptions) (MaterializeResult, error) {
	if err := checkReason(opts.SkipReason); err != nil {
		return MaterializeResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return MaterializeResult{}, err
	}
	return cov.Materialize(ctx, from, to, opts)
}

// Reopen makes the COMPLETE and SKIP slots of [from, to) AVAILABLE again
// (a backfill: late data arrived), with opts.Reason as their message and a
// new generation, and wakes idle workers. Slots being worked on are left
// alone and listed in the result.
func (c *Client) Reopen(ctx context.Context, s Series, from, to time.Time, opts ReopenOptions) (ReopenResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return ReopenResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return ReopenResult{}, err
	}
	res, err := cov.Reopen(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opReopened, s, from, to, reasonOr(opts.Reason, coverage.DefaultReopenReason), res.Reopened, false)
	}
	return res, err
}

// SkipRange marks the slots of [from, to) SKIP with opts.Reason (nothing to
// do for them), creating missing ones as SKIP; finished and held slots are
// left alone.
func (c *Client) SkipRange(ctx context.Context, s Series, from, to time.Time, opts SkipOptions) (SkipResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return SkipResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return SkipResult{}, err
	}
	res, err := cov.Skip(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opSkipped, s, from, to, reasonOr(opts.Reason, coverage.DefaultSkipReason), res.Skipped+res.Inserted, false)
	}
	return res, err
}

// Retry makes the slots of [from, to) that wait for a retry, or gave up
// (parked), acquirable now.
func (c *Client) Retry(ctx context.Context, s Series, from, to time.Time, opts RetryOptions) (RetryResult, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return RetryResult{}, err
	}
	res, err := cov.Retry(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opRetried, s, from, to, "", res.Retried, false)
	}
	return res, err
}

// MaterializeTx is Materialize inside tx, the caller's transaction: the
// slots exist if and only if tx commits, and idle workers are woken when it
// does. The same holds for ReopenTx, SkipTx and RetryTx, so that "insert the
// late data and re-open its window" is one atomic change:
//
//	tx, _ := pool.Begin(ctx)
//	tx.Exec(ctx, `INSERT INTO readings …`)
//	client.ReopenTx(ctx, tx, series, from, to, almanac.ReopenOptions{Reason: "late readings"})
//	tx.Commit(ctx)
//
// Inside tx nothing is retried (a fault loses tx; retry the transaction),
// each operation runs in a savepoint, so a failed one leaves tx usable, and
// the locks it takes are held until tx ends: keep such transactions short.
// The series lookup runs outside tx, once per series and client.
func (c *Client) MaterializeTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts MaterializeOptions) (MaterializeResult, error) {
	if err := checkReason(opts.SkipReason); err != nil {
		return MaterializeResult{}, err
	}
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return MaterializeResult{}, err
	}
	return cov.WithTx(tx).Materialize(ctx, from, to, opts)
}

// ReopenTx is Reopen inside tx, the caller's transaction (see
// MaterializeTx).
func (c *Client) ReopenTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts ReopenOptions) (ReopenResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return ReopenResult{}, err
	}
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return ReopenResult{}, err
	}
	res, err := cov.WithTx(tx).Reopen(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opReopened, s, from, to, reasonOr(opts.Reason, coverage.DefaultReopenReason), res.Reopened, true)
	}
	return res, err
}

// SkipTx is SkipRange inside tx, the caller's transaction (see
// MaterializeTx).
func (c *Client) SkipTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts SkipOptions) (SkipResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return SkipResult{}, err
	}
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return SkipResult{}, err
	}
	res, err := cov.WithTx(tx).Skip(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opSkipped, s, from, to, reasonOr(opts.Reason, coverage.DefaultSkipReason), res.Skipped+res.Inserted, true)
	}
	return res, err
}

// RetryTx is Retry inside tx, the caller's transaction (see
// MaterializeTx).
func (c *Client) RetryTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts RetryOptions) (RetryResult, error) {
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return RetryResult{}, err
	}
	res, err := cov.WithTx(tx).Retry(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opRetried, s, from, to, "", res.Retried, true)
	}
	return res, err
}

// History returns the record of the slot of s that contains t: who held it,
// what failed, who re-opened it and why, oldest first (within the history's
// retention).
func (c *Client) History(ctx context.Context, s Series, t time.Time) (History, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return History{}, err
	}
	return cov.History(ctx, t)
}

// PruneOptions tune PruneHistory. The zero value deletes.
type PruneOptions struct {
	// DryRun counts what would be deleted, and deletes nothing.
	DryRun bool
}

// PruneHistory deletes the history events older than the schema's
// retention (90 days unless set), in batches, and returns how many it
// deleted (with opts.DryRun, would delete). Started clients do it every
// sweep.
func (c *Client) PruneHistory(ctx context.Context, opts PruneOptions) (int64, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return 0, err
	}
	return coverage.PruneHistory(ctx, c.pool, coverage.PruneOptions{Schema: c.opts.Schema, DryRun: opts.DryRun})
}

// CompactOptions tune Compact.
type CompactOptions struct {
	// Before is the retention boundary: the finished (COMPLETE and SKIP)
	// slots that end at or before it are compacted. Required.
	Before time.Time
	// Series are the series to compact. Default: every registered series.
	Series []Series
	// DryRun counts the finished rows that would be compacted, and changes
	// nothing.
	DryRun bool
	// Progress, if set, is called after each chunk of each series.
	Progress ProgressFunc
}

// CompactResult says what Compact did.
type CompactResult struct {
	// Compacted is the number of slot rows deleted into compacted ranges
	// (with DryRun, that would be), over all the series.
	Compacted int64
	// Ranges is the number of compacted ranges those series have
	// afterwards (the rows of the slot_compacted table that stand for the
	// deleted ones; 0 with DryRun).
	Ranges int64
}

// Compact bounds the slot table's size: it deletes the rows of finished
// slots that end at or before opts.Before and records them as compacted
// ranges, about one row per series and run of one state. Compacted slots
// stay finished for every reader and writer (Gaps, Status, Materialize: no
// worker can ever claim one again); a Reopen of any of them brings its row
// back as a new generation. Their per-slot detail (attempts, data,
// messages) is lost; their history stays until PruneHistory. Run it on a
// retention, e.g. daily with Before = now - 90 days (`almanac compact
// --older-than 90d`). Series are worked one by one, in transactions of at
// most Options.ChunkSize slots; on an error the work done so far stays.
func (c *Client) Compact(ctx context.Context, opts CompactOptions) (CompactResult, error) {
	if opts.Before.IsZero() {
		return CompactResult{}, fmt.Errorf("%w: compact needs a retention boundary (CompactOptions.Before)", ErrInvalid)
	}
	ctx = c.call(ctx)
	series := opts.Series
	if len(series) == 0 {
		all, err := c.ListSeries(ctx)
		if err != nil {
			return CompactResult{}, err
		}
		for _, info := range all {
			series = append(series, info.Series)
		}
	}
	var res CompactResult
	for _, s := range series {
		cov, err := c.coverage(ctx, s)
		if err != nil {
			return res, err
		}
		r, err := cov.Compact(ctx, opts.Before, coverage.CompactOptions{DryRun: opts.DryRun, Progress: opts.Progress})
		res.Compacted += r.Compacted
		res.Ranges += r.Ranges
		if err != nil {
			return res, fmt.Errorf("compact %s: %w", s, err)
		}
	}
	return res, nil
}

// reasonOr returns reason, or def when it is empty.
func reasonOr(reason, def string) string {
	if reason == "" {
		return def
	}
	return reason
}

// checkReason refuses a reason that cannot be stored faithfully before
// anything (the series lookup included) reaches the database; "" means the
// operation's default.
func checkReason(reason string) error {
	if reason == "" {
		return nil
	}
	return input.CheckReason(reason)
}

// coverage returns the coverage client of s, created (and s checked against
// its registration) once per series.
func (c *Client) coverage(ctx context.Context, s Series) (*coverage.Client, error) {
	if err := c.checkPool(ctx); err != nil {
		return nil, err
	}
	key := s.Name() + "\x00" + s.Interval().String()
	c.mu.Lock()
	cov := c.covs[key]
	c.mu.Unlock()
	if cov != nil && cov.Series().Location().String() == s.Location().String() && cov.Series().Origin().Equal(s.Origin()) {
		return cov, nil
	}
	cov, err := coverage.New(ctx, c.pool, s, coverage.Options{Schema: c.opts.Schema, Actor: c.opts.Actor, ChunkSize: c.opts.ChunkSize})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.covs[key] = cov
	c.mu.Unlock()
	return cov, nil
}
