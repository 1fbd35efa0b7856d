package almanactest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/almanacdev/almanac"
)

// Work runs job's handler for the one slot of job.Series that contains t,
// as a client's worker would, and returns the outcomes it recorded: it is
// Client.Drain scoped to that slot (job.From and job.To are set to it), in
// a client of its own on Pool with opts (opts.Schema as Client takes it: a
// fresh, migrated schema when empty). The slot is materialized if it is
// missing, acquired in the job's mode (locked, batched or lease), worked
// under the job's Policy, and its outcome recorded, with the handler's
// writes in locked mode. The slot must be due (its end plus Policy.Lag in
// the past); a slot that is not is left alone, and the Summary is zero.
//
// As in Drain, a failure or a snooze whose retry comes within a few seconds
// is run again within the call (the default policy retries after 1 s, 2 s
// and 4 s, then waits 8 s, and the slot is left failed); give the job a
// Policy.Retry with a longer delay to see one failure. A handler's failure
// is an outcome (Summary.Failed or Parked), not a test failure; Work fails
// the test for anything else: an invalid job, a database error, a minute
// passing. Check what the handler wrote, and the slot with RequireStatus.
func Work(tb testing.TB, opts almanac.Options, job almanac.Job, t time.Time) almanac.Summary {
	tb.Helper()
	if opts.Schema == "" {
		opts.Schema = Schema(tb)
	}
	sl, err := job.Series.Floor(t)
	if err != nil {
		tb.Fatalf("almanactest: the slot of series %s at %s: %v", job.Series.Name(), t, err)
		return almanac.Summary{}
	}
	job.From, job.To = sl.Start, sl.End
	c := Client(tb, opts)
	if err := c.Register(job); err != nil {
		tb.Fatalf("almanactest: register the job of series %s: %v", job.Series.Name(), err)
		return almanac.Summary{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	summary, err := c.Drain(ctx)
	var left *almanac.IncompleteError
	if err != nil && !(errors.As(err, &left) && left.Cause == nil) {
		tb.Fatalf("almanactest: work slot %s of series %s: %v", sl, job.Series.Name(), err)
	}
	return summary
}
