package suite

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/slot"
)

// The raw baselines replay the very statements the engine sends: a pgx
// tracer records them while the engine works one slot, and a bare loop
// sends them again with the arguments of each slot. What differs between
// the engine and its baseline is then only the engine's own work in Go.

// statement is one SQL statement as the engine sent it.
type statement struct {
	sql  string
	args []any
}

// unit is what went to the server in one call: a single statement, or a
// batch sent in one round trip.
type unit []statement

// recorder is a pgx tracer that keeps the units sent on a pool, in order.
type recorder struct {
	mu    sync.Mutex
	units []unit
}

func (r *recorder) add(u unit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.units = append(r.units, u)
}

func (r *recorder) take() []unit {
	r.mu.Lock()
	defer r.mu.Unlock()
	units := r.units
	r.units = nil
	return units
}

// TraceQueryStart records a single statement.
func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.add(unit{{data.SQL, data.Args}})
	return ctx
}

// TraceQueryEnd does nothing.
func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records the statements of a batch as one unit.
func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var u unit
	for _, q := range data.Batch.QueuedQueries {
		u = append(u, statement{q.SQL, q.Arguments})
	}
	r.add(u)
	return ctx
}

// TraceBatchQuery does nothing.
func (r *recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// capture loads n AVAILABLE slots of grid, lets work handle them on a
// queue whose pool records what it sends, and returns the units sent.
func (s *schema) capture(ctx context.Context, grid slot.Series, n int, work func(context.Context, *acquire.Queue) error) ([]unit, error) {
	if err := s.fresh(ctx, grid, n, "AVAILABLE"); err != nil {
		return nil, err
	}
	rec := &recorder{}
	cfg := s.e.admin.Config()
	cfg.MaxConns = 1 + reserve
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	q, err := acquire.New(ctx, pool, grid, acquire.Options{Schema: s.name, Reserve: reserve})
	if err != nil {
		return nil, err
	}
	rec.take() // the series lookup of New
	if err := work(ctx, q); err != nil {
		return nil, err
	}
	return rec.take(), nil
}

// lockedSQL is locked mode's work of a transaction: begin, select and lock,
// record the outcomes, commit, each a round trip. The engine records one
// outcome with scalar arguments and several with arrays, so the statements
// are captured for one slot or for batches (one).
type lockedSQL struct {
	begin, selectLocked, finish, commit statement
	one                                 bool
}

// Positions of the arguments a replay changes; replay fails with a clear
// error when acquire's statements no longer have this shape.
const (
	selectArgs     = 9 // name, interval, max, from, to, lag, takeover grace, and where to search for AVAILABLE slots (from, to)
	selectMax      = 2
	finishArgs     = 11 // name, interval, starts, statuses, fences, attempts, failures, messages, delays, data, owner
	finishStarts   = 2
	finishFences   = 4
	finishAttempts = 5
	claimArgs      = 11 // name, interval, n, from, to, owner, ttl, lag, takeover grace, and where to search for AVAILABLE slots (from, to)
	claimN         = 2
	completeArgs   = 5 // name, interval, starts, owner, fences
	completeStarts = 2
	completeFences = 4
)

func noop(context.Context, pgx.Tx, acquire.Slot) error { return nil }

// captureLocked records locked mode's statements for transactions of one
// slot, or of batches (of two, widened when replayed).
func (s *schema) captureLocked(ctx context.Context, grid slot.Series, one bool) (lockedSQL, error) {
	n := 2
	if one {
		n = 1
	}
	units, err := s.capture(ctx, grid, n, func(ctx context.Context, q *acquire.Queue) error {
		results, err := q.RunBatch(ctx, n, noop)
		if err == nil && len(results) != n {
			err = fmt.Errorf("captured %d slots, expected %d", len(results), n)
		}
		return err
	})
	if err != nil {
		return lockedSQL{}, fmt.Errorf("capture locked mode: %w", err)
	}
	shape := func(u unit) string { return fmt.Sprintf("%d statement(s), %d argument(s)", len(u), len(u[0].args)) }
	if len(units) != 4 || slices.ContainsFunc(units, func(u unit) bool { return len(u) != 1 }) ||
		len(units[1][0].args) != selectArgs || len(units[2][0].args) != finishArgs || !strings.EqualFold(units[3][0].sql, "commit") {
		var got []string
		for _, u := range units {
			got = append(got, shape(u))
		}
		return lockedSQL{}, fmt.Errorf("capture locked mode: expected begin, select (%d arguments), update (%d arguments) and commit; got %s: update bench/suite/replay.go",
			selectArgs, finishArgs, strings.Join(got, "; "))
	}
	return lockedSQL{units[0][0], units[1][0], units[2][0], units[3][0], one}, nil
}

// step works up to n slots in one transaction as locked mode does, with a
// bare loop, recording each slot it selected in c.
func (l lockedSQL) step(ctx context.Context, pool *pgxpool.Pool, n int, c *counter) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, l.begin.sql); err != nil {
		return 0, err
	}
	selectArgs := slices.Clone(l.selectLocked.args)
	selectArgs[selectMax] = n
	var starts []time.Time
	var fences []int64
	var attempts []int
	rows, err := conn.Query(ctx, l.selectLocked.sql, selectArgs...)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		// slot_start, slot_end, attempts, fail_count, data, message, took_over, fence, generation, upstream, held_fence, xid
		var start time.Time
		var attempt int
		var fence int64
		if err := rows.Scan(&start, nil, &attempt, nil, nil, nil, nil, &fence, nil, nil, nil, nil); err != nil {
			rows.Close()
			return 0, err
		}
		starts, fences, attempts = append(starts, start), append(fences, fence), append(attempts, attempt+1)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(starts) == 0 {
		_, err := conn.Exec(ctx, "ROLLBACK")
		return 0, err
	}
	for _, start := range starts {
		c.ran(index(start))
	}
	var args []any
	if l.one {
		args = slices.Clone(l.finish.args)
		args[finishStarts], args[finishFences], args[finishAttempts] = starts[0], fences[0], attempts[0]
	} else {
		args = widen(l.finish.args, 2, len(starts))
		args[finishStarts], args[finishFences], args[finishAttempts] = starts, fences, attempts
	}
	if _, err := conn.Exec(ctx, l.finish.sql, args...); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, l.commit.sql); err != nil {
		return 0, err
	}
	return len(starts), nil
}

// widen returns args, captured for a batch of from slots, for n slots:
// every array argument of from elements holds n copies of its first.
func widen(args []any, from, n int) []any {
	out := slices.Clone(args)
	for i, a := range out {
		v := reflect.ValueOf(a)
		if v.Kind() != reflect.Slice || v.Len() != from {
			continue
		}
		w := reflect.MakeSlice(v.Type(), n, n)
		for k := range n {
			w.Index(k).Set(v.Index(0))
		}
		out[i] = w.Interface()
	}
	return out
}

// leaseSQL is lease mode's work of a batch: a claim and a completion, each
// one batch of begin, settings, the statement and commit.
type leaseSQL struct {
	claim, complete unit
	// claimAt and completeAt locate the statement with arguments in each.
	claimAt, completeAt int
}

// captureLease records lease mode's statements for a claim and its
// completion.
func (s *schema) captureLease(ctx context.Context, grid slot.Series) (leaseSQL, error) {
	units, err := s.capture(ctx, grid, 1, func(ctx context.Context, q *acquire.Queue) error {
		leases, err := q.Claim(ctx, 1)
		if err == nil && len(leases) != 1 {
			err = fmt.Errorf("claimed %d slots, expected 1", len(leases))
		}
		if err != nil {
			return err
		}
		_, err = q.CompleteMany(ctx, leases)
		return err
	})
	if err != nil {
		return leaseSQL{}, fmt.Errorf("capture lease mode: %w", err)
	}
	var l leaseSQL
	if len(units) == 2 {
		l = leaseSQL{claim: units[0], complete: units[1], claimAt: withArgs(units[0]), completeAt: withArgs(units[1])}
	}
	if len(units) != 2 || l.claimAt < 0 || l.completeAt < 0 ||
		len(l.claim[l.claimAt].args) != claimArgs || len(l.complete[l.completeAt].args) != completeArgs {
		return leaseSQL{}, fmt.Errorf("capture lease mode: expected a claim batch (%d arguments) and a completion batch (%d arguments); got %d units: update bench/suite/replay.go",
			claimArgs, completeArgs, len(units))
	}
	return l, nil
}

// withArgs returns the index of the only statement of u that has
// arguments, or -1.
func withArgs(u unit) int {
	at := -1
	for i, st := range u {
		if len(st.args) > 0 {
			if at >= 0 {
				return -1
			}
			at = i
		}
	}
	return at
}

// step claims up to n slots and completes them as lease mode does, with a
// bare loop, recording each slot it claimed in c.
func (l leaseSQL) step(ctx context.Context, pool *pgxpool.Pool, n int, c *counter) (int, error) {
	claimArgs := slices.Clone(l.claim[l.claimAt].args)
	claimArgs[claimN] = n
	var starts []time.Time
	var fences []int64
	err := sendUnit(ctx, pool, l.claim, l.claimAt, claimArgs, func(rows pgx.Rows) error {
		for rows.Next() {
			// slot_start, slot_end, attempts, fail_count, data, message, took_over, fence, generation, upstream, lease_until, ctid
			var start time.Time
			var fence int64
			if err := rows.Scan(&start, nil, nil, nil, nil, nil, nil, &fence, nil, nil, nil, nil); err != nil {
				return err
			}
			starts, fences = append(starts, start), append(fences, fence)
		}
		return rows.Err()
	})
	if err != nil || len(starts) == 0 {
		return 0, err
	}
	for _, start := range starts {
		c.ran(index(start))
	}
	completeArgs := slices.Clone(l.complete[l.completeAt].args)
	completeArgs[completeStarts], completeArgs[completeFences] = starts, fences
	completed := 0
	err = sendUnit(ctx, pool, l.complete, l.completeAt, completeArgs, func(rows pgx.Rows) error {
		for rows.Next() {
			completed++
		}
		return rows.Err()
	})
	if err == nil && completed != len(starts) {
		err = fmt.Errorf("completed %d of %d claimed slots", completed, len(starts))
	}
	return len(starts), err
}

// sendUnit sends the statements of u as one batch, the one at index at
// with args, whose rows go to read.
func sendUnit(ctx context.Context, pool *pgxpool.Pool, u unit, at int, args []any, read func(pgx.Rows) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	for i, st := range u {
		if i == at {
			b.Queue(st.sql, args...).Query(read)
		} else {
			b.Queue(st.sql)
		}
	}
	return conn.SendBatch(ctx, b).Close()
}
