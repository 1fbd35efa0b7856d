package almanac

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/internal/retry"
	"github.com/almanacdev/almanac/internal/seriesdb"
)

// Coverage operations. Each works on one registered series over a
// half-open range [from, to), retries transient faults within
// Options.RetryBudget, and records what it changes in the slots' history
// as done by Options.Actor. The Tx variants work inside the caller's
// transaction instead (see MaterializeTx). The types they return are
// defined in package coverage, which runs the same operations on a single
// connection or inside a tool, and are named here with the same names.

// Gap is a maximal run of missing slots: every slot starting in
// [Start, End) has no row. Its fields are documented at coverage.Gap.
type Gap = coverage.Gap

// Status summarizes a range: its slots by state (the embedded Counts), the
// missing ones (Missing, in Gaps runs; FirstMissing) and the share finished
// (Covered). Its fields are documented at coverage.Status.
type Status = coverage.Status

// Counts are the stored slots of a range by state (Complete, Skip,
// Available, Backoff, Parked, Acquired, LeaseExpired), the slots waiting
// for an upstream series and what they wait on (WaitingUpstream,
// WaitingOn), the oldest open slot, the last completion and the last
// note. Its fields are documented at coverage.Counts.
type Counts = coverage.Counts

// Held is a slot an operation left alone because a worker holds it: its
// bounds, status, and lease (Owner, LeaseUntil) or row lock (Locked). Its
// fields are documented at coverage.Held.
type Held = coverage.Held

// WriteOptions tune the operations that write a range (Materialize,
// Reopen, Skip, Retry, Compact) and PruneHistory: Reason (why, stored with
// the slots), DryRun, Progress, and what Reopen re-opens (States, Parked).
// Its fields are documented, with their defaults, at coverage.WriteOptions.
type WriteOptions = coverage.WriteOptions

// WriteResult says what a write over a range did: the slots it changed
// (Changed, of which Inserted were missing), those it left alone because
// workers hold them (Held), and the counts particular to each operation.
// Its fields are documented at coverage.WriteResult.
type WriteResult = coverage.WriteResult

// History is a slot's record: its row as it is now (Current), the
// compacted run it lies in (Compacted), and its events, oldest first. Its
// fields are documented at coverage.History.
type History = coverage.History

// The stored statuses of a slot (Held.Status, Counts and History).
const (
	StatusAvailable = "AVAILABLE"
	StatusAcquired  = "ACQUIRED"
	StatusComplete  = "COMPLETE"
	StatusSkip      = "SKIP"
)

// Gaps returns the missing slots of [from, to) as maximal runs, in order.
// Only due slots can be missing: the range is cut at the series' first slot
// not due yet (its end plus the series' lag has not passed on the database
// clock; see SeriesOptions.Lag), so a range in the future has no gaps.
// Memory is O(gaps).
func (c *Client) Gaps(ctx context.Context, s Series, from, to time.Time) ([]Gap, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return nil, err
	}
	var at time.Time
	err = retry.Do(ctx, func(ctx context.Context) (err error) {
		at, err = seriesdb.DueAt(ctx, c.pool, c.opts.Schema, s.Name(), s.Interval())
		return err
	})
	if err != nil {
		return nil, err
	}
	due := seriesdb.DueFrom(s, at)
	if to.After(due) && !from.After(to) {
		to = due
		if from.After(due) {
			to = from
		}
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
// with opts.Reason) and wakes idle workers. It is idempotent and safe
// from any number of processes at once.
func (c *Client) Materialize(ctx context.Context, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return WriteResult{}, err
	}
	return cov.Materialize(ctx, from, to, opts)
}

// Reopen makes the COMPLETE and SKIP slots of [from, to) AVAILABLE again
// (a backfill: late data arrived), with opts.Reason as their message and a
// new generation, and wakes idle workers. Slots being worked on are left
// alone and listed in the result (WriteResult.Held).
func (c *Client) Reopen(ctx context.Context, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := cov.Reopen(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opReopened, s, from, to, reasonOr(opts.Reason, defaults.ReopenReason), res.Changed, false)
	}
	return res, err
}

// Skip marks the slots of [from, to) SKIP with opts.Reason (nothing to do
// for them: a holiday, a known outage), creating missing ones as SKIP so the
// hole stays visible; finished and held slots are left alone.
func (c *Client) Skip(ctx context.Context, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := cov.Skip(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opSkipped, s, from, to, reasonOr(opts.Reason, defaults.SkipReason), res.Changed, false)
	}
	return res, err
}

// Retry makes the slots of [from, to) that wait for a retry, or gave up
// (parked), acquirable now.
func (c *Client) Retry(ctx context.Context, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	ctx = c.call(ctx)
	cov, err := c.coverage(ctx, s)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := cov.Retry(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opRetried, s, from, to, "", res.Changed, false)
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
//	client.ReopenTx(ctx, tx, series, from, to, almanac.WriteOptions{Reason: "late readings"})
//	tx.Commit(ctx)
//
// Inside tx nothing is retried (a fault loses tx; retry the transaction),
// each operation runs in a savepoint, so a failed one leaves tx usable, and
// the locks it takes are held until tx ends: keep such transactions short.
// The series lookup runs outside tx, once per series and client.
func (c *Client) MaterializeTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return WriteResult{}, err
	}
	return cov.WithTx(tx).Materialize(ctx, from, to, opts)
}

// ReopenTx is Reopen inside tx, the caller's transaction (see
// MaterializeTx).
func (c *Client) ReopenTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := cov.WithTx(tx).Reopen(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opReopened, s, from, to, reasonOr(opts.Reason, defaults.ReopenReason), res.Changed, true)
	}
	return res, err
}

// SkipTx is Skip inside tx, the caller's transaction (see
// MaterializeTx).
func (c *Client) SkipTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	if err := checkReason(opts.Reason); err != nil {
		return WriteResult{}, err
	}
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := cov.WithTx(tx).Skip(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opSkipped, s, from, to, reasonOr(opts.Reason, defaults.SkipReason), res.Changed, true)
	}
	return res, err
}

// RetryTx is Retry inside tx, the caller's transaction (see
// MaterializeTx).
func (c *Client) RetryTx(ctx context.Context, tx pgx.Tx, s Series, from, to time.Time, opts WriteOptions) (WriteResult, error) {
	cov, err := c.coverage(c.call(ctx), s)
	if err != nil {
		return WriteResult{}, err
	}
	res, err := cov.WithTx(tx).Retry(ctx, from, to, opts)
	if err == nil && !opts.DryRun {
		c.noteOp(ctx, opRetried, s, from, to, "", res.Changed, true)
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

// PruneHistory deletes the history events older than the schema's
// retention (90 days unless set), in batches, and returns how many it
// deleted (with opts.DryRun, would delete; the other options do not apply).
// Started clients do it every sweep.
func (c *Client) PruneHistory(ctx context.Context, opts WriteOptions) (int64, error) {
	ctx = c.call(ctx)
	if err := c.checkPool(ctx); err != nil {
		return 0, err
	}
	return coverage.PruneHistory(ctx, c.pool, c.opts.Schema, opts)
}

// Compact bounds the slot table's size: it deletes the rows of finished
// slots (COMPLETE and SKIP) that end at or before before and records them
// as compacted ranges, about one row per series and run of one state, for
// the given series, or every registered series (but the unusable rows
// ListSeries flags) when none is given. Compacted slots stay finished for every reader and writer (Gaps, Status,
// Materialize: no worker can ever claim one again); a Reopen of any of them
// brings its row back as a new generation. Their per-slot detail (attempts,
// data, messages) is lost; their history stays until PruneHistory. Run it
// on a retention, e.g. daily with before = now - 90 days (`almanac compact
// --older-than 90d`). Series are worked one by one, in transactions of at
// most Options.ChunkSize slots; on an error the work done so far stays.
// The result sums the series' (Changed: the rows compacted; Ranges: the
// compacted ranges they have afterwards); opts.DryRun counts the rows that
// would be compacted, and Progress is called after each chunk of each
// series. A zero before is an error wrapping ErrInvalid.
func (c *Client) Compact(ctx context.Context, before time.Time, opts WriteOptions, series ...Series) (WriteResult, error) {
	if before.IsZero() {
		return WriteResult{}, fmt.Errorf("%w: compact needs a retention boundary (before)", ErrInvalid)
	}
	ctx = c.call(ctx)
	if len(series) == 0 {
		all, err := c.ListSeries(ctx)
		if err != nil {
			return WriteResult{}, err
		}
		for _, info := range all {
			if info.Err == nil { // an unusable row has no slots almanac could read
				series = append(series, info.Series)
			}
		}
	}
	var res WriteResult
	for _, s := range series {
		cov, err := c.coverage(ctx, s)
		if err != nil {
			return res, err
		}
		r, err := cov.Compact(ctx, before, opts)
		res.Changed += r.Changed
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
	cached, ok := c.covs[key]
	c.mu.Unlock()
	if ok && cached.grid.Location().String() == s.Location().String() && cached.grid.Origin().Equal(s.Origin()) {
		return cached.cov, nil
	}
	cov, err := coverage.New(ctx, c.pool, s, coverage.Options{Schema: c.opts.Schema, Actor: c.opts.Actor, ChunkSize: c.opts.ChunkSize})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.covs[key] = seriesCoverage{grid: s, cov: cov}
	c.mu.Unlock()
	return cov, nil
}

// seriesCoverage is the coverage client of a series, and the grid it was
// checked with against the registration.
type seriesCoverage struct {
	grid Series
	cov  *coverage.Client
}
