package acquire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// Defaults of Options and Policy, stated on their fields.
const (
	defaultMaxWork       = 5 * time.Minute
	defaultDeadMan       = 10 * time.Second
	defaultLeaseTTL      = 30 * time.Second
	defaultReserve       = 2
	defaultTakeoverGrace = 5 * time.Second
)

// ErrPoolTooSmall is returned by New when the pool cannot both hold a
// locked-mode transaction and keep Options.Reserve connections free for
// everything else (lease writes, heartbeats, status queries, the handlers'
// own use of the pool). An exhausted pool does not fail, it hangs, so this is
// checked up front.
var ErrPoolTooSmall = errors.New("pool too small for locked mode")

// Options configure a Queue. The zero value is usable.
type Options struct {
	// Schema holding almanac's tables. Default "almanac".
	Schema string

	// From and To limit acquisition to slots starting in [From, To). Zero
	// values mean unbounded; New fails with an error wrapping slot.ErrInvalid
	// when From is after To.
	From, To time.Time

	// Policy is how the queue takes, holds and retries slots: the settings
	// a job of the root package sets for its slots (almanac.Job embeds the
	// same Policy).
	Policy

	// Owner identifies this queue's leases. Default: a random UUID per
	// Queue. With the default, a claim whose connection was lost while it
	// committed has its slots released at once; with an Owner given (which
	// may be shared), they wait for their leases to expire.
	Owner uuid.UUID
	// Reserve is how many connections of the pool locked mode never holds,
	// so that completing, failing and heart-beating never wait for a
	// connection. Default 2. It applies to every Queue on the same pool and
	// is fixed by the first Queue created for that pool.
	Reserve int
	// CompletionWindow, when positive, makes a lease's completion (Finish
	// with a nil error) wait up to this long for the completions of other
	// leases of the queue, to be written with them in one statement: for
	// many workers that hold one lease each (almanac's lease-mode jobs wait
	// 5 ms). Default 0: each completion is written at once.
	CompletionWindow time.Duration
	// Logger receives warnings (a lost connection, an ejection) and errors
	// (a lease write refused because the slot is no longer this holder's).
	// Default: silent.
	Logger *slog.Logger
}

// Policy is how slots are taken, held and retried. The zero value is
// usable: every field has a default, stated with it.
type Policy struct {
	// Lag is how long after its end a slot becomes due: an AVAILABLE slot is
	// acquired only once slot_end + Lag has passed on the database clock,
	// whatever the worker's clock says ("the five-minute window that began
	// six minutes ago" is a PT5M series with a one-minute lag, to absorb
	// late data). Default 0: as soon as it ends. A negative Lag lets slots be
	// acquired before they end (work that does not wait for its interval to
	// be over), by that much.
	Lag time.Duration
	// NewestFirst acquires the latest slot first (for freshness) instead of
	// the oldest (for completeness, the default). Oldest first, a slot that
	// becomes acquirable again behind the slots the queue is working on,
	// by another process's hand, may wait up to a second while there is
	// work after it (see Rewind).
	NewestFirst bool
	// MaxWork bounds one handler run in locked mode: its context gets this
	// deadline. A handler that then returns an error fails with "handler
	// exceeded MaxWork"; one that returns nil is completed all the same
	// (its transaction, and so its lock, lasted the whole time, so the slot
	// was never anyone else's), with the overrun written in the slot's
	// message and Result.Overrun; one that has not returned a quarter of a
	// second after the deadline is given up on: its transaction is closed
	// and the failure recorded. Default 5 min. Work that may take longer
	// belongs in lease mode.
	MaxWork time.Duration
	// DeadMan is the locked-mode dead-man switch: the transaction sets
	// idle_in_transaction_session_timeout to it, and the worker pings its
	// connection every DeadMan/4. A worker that freezes (SIGSTOP, a lost
	// host) stops pinging, and PostgreSQL ends its session and releases the
	// slot within DeadMan. Pings also stop once a handler overruns MaxWork
	// by DeadMan, so a handler that ignores its context cannot hold a slot
	// for ever. Default 10 s; at least 1 s.
	DeadMan time.Duration
	// LeaseTTL is how long a lease lasts without a heartbeat. Default 30 s.
	LeaseTTL time.Duration
	// TakeoverGrace is how long a lease must have been expired before this
	// queue takes the slot over. A holder cut off from the database (a
	// failover, a restart) may have finished its work and be waiting to
	// record the outcome; the grace lets it do so once the database is
	// back, instead of having its slot run a second time. The database
	// clock runs on while the server is down, so the grace also counts
	// from the server's start (pg_postmaster_start_time): after a restart,
	// however long the outage, no lease is taken over before the server
	// has been up for the grace. A promoted standby's start time is its
	// own, usually long before its promotion, and a server whose
	// postmaster survives a crash (a backend killed) keeps its start
	// time: there the grace counts from the lease's expiry alone, and a
	// holder waiting to record keeps its slot through an outage shorter
	// than LeaseTTL less the time since its last renewal (at most
	// LeaseTTL/3 with KeepAlive), plus the grace: 25 s with the defaults.
	// Default 5 s; a negative value means none.
	TakeoverGrace time.Duration
	// StopBefore is how long before its lease could expire a lease holder
	// that cannot renew it (the database is unreachable) gives the lease
	// up, so that its work has stopped by the time another worker may take
	// the slot over: at least the time the work needs to stop. See
	// Lease.Deadline. Default LeaseTTL/10; it must be less than
	// LeaseTTL/2, so that a lease survives one failed heartbeat.
	StopBefore time.Duration

	// Retry maps a failure to a delay or to giving up. Default DefaultRetry.
	Retry RetryPolicy
	// MaxAttempts parks a slot after this many failures since its last
	// success or re-open. 0 means the series' max_attempts setting, and no
	// limit when that is unset too.
	MaxAttempts int
}

// Queue acquires the slots of one series and records their outcomes. It is
// safe for concurrent use by many goroutines; each locked-mode run holds one
// connection of the pool for as long as its handlers run.
type Queue struct {
	pool     *pgxpool.Pool
	grid     slot.Series
	name     string
	interval string
	opts     Options
	held     *budget
	sql      *statements // shared by the queues of one schema and options (statementsFor)
	from, to time.Time
	// floor is where the next search for AVAILABLE slots starts, and
	// frontier the queue's share of the series' frontier.
	floor    *floor
	frontier frontier
	// ctl is what the queue last read of the series' controls (see
	// controls).
	ctl controlsState

	// merge writes completions together (Options.CompletionWindow); nil
	// when each is written at once.
	merge *merger

	// leases are this queue's live leases (see holdings); sharedOwner is
	// set when Options.Owner was given, and orphans are then left alone.
	leases      holdings
	sharedOwner bool
	// maxWorkCause ends a locked-mode handler's context at MaxWork; one
	// value for all of them, made once.
	maxWorkCause error

	testNoPing bool // tests simulate a frozen worker by not pinging
	// testLoseAck, when it returns true, makes a write that committed
	// report a lost connection, as when the acknowledgment of a COMMIT is
	// lost with its connection.
	testLoseAck func() bool
}

// New returns a Queue for the registered series grid. It fails when the
// series is not registered with this grid (an error wrapping
// almanac.ErrUnknownSeries or almanac.ErrSeriesConflict: the root package
// names the errors the layers share), and with ErrPoolTooSmall when the
// pool leaves no connection for locked mode.
func New(ctx context.Context, pool *pgxpool.Pool, grid slot.Series, opts Options) (*Queue, error) {
	if opts.Schema == "" {
		opts.Schema = sqlschema.Default
	}
	if err := sqlschema.Check(opts.Schema); err != nil {
		return nil, err
	}
	if opts.MaxWork <= 0 {
		opts.MaxWork = defaultMaxWork
	}
	if opts.DeadMan <= 0 {
		opts.DeadMan = defaultDeadMan
	}
	opts.DeadMan = max(opts.DeadMan, time.Second)
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = defaultLeaseTTL
	}
	if opts.TakeoverGrace == 0 {
		opts.TakeoverGrace = defaultTakeoverGrace
	}
	opts.TakeoverGrace = max(opts.TakeoverGrace, 0)
	if opts.StopBefore <= 0 {
		opts.StopBefore = opts.LeaseTTL / 10
	}
	if opts.StopBefore >= opts.LeaseTTL/2 {
		return nil, fmt.Errorf("%w: StopBefore %s must be less than half of LeaseTTL %s", slot.ErrInvalid, opts.StopBefore, opts.LeaseTTL)
	}
	if !opts.From.IsZero() && !opts.To.IsZero() && opts.From.After(opts.To) {
		return nil, fmt.Errorf("%w: From %s is after To %s", slot.ErrInvalid, opts.From.Format(time.RFC3339Nano), opts.To.Format(time.RFC3339Nano))
	}
	if opts.Retry == nil {
		opts.Retry = DefaultRetry
	}
	sharedOwner := opts.Owner != uuid.Nil
	if !sharedOwner {
		opts.Owner = uuid.New()
	}
	if opts.Reserve <= 0 {
		opts.Reserve = defaultReserve
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	def, err := seriesdb.Lookup(ctx, pool, opts.Schema, grid.Name(), grid.Interval())
	if err != nil {
		return nil, err
	}
	if def.Grid.Location().String() != grid.Location().String() || !def.Grid.Origin().Equal(grid.Origin()) {
		return nil, fmt.Errorf("%w: %s is registered as %s", seriesdb.ErrSeriesConflict, grid, def.Grid)
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = def.MaxAttempts
	}
	held, err := budgetFor(pool, opts.Reserve)
	if err != nil {
		return nil, err
	}
	q := &Queue{
		pool: pool, grid: def.Grid, name: grid.Name(), interval: grid.Interval().String(),
		opts: opts, held: held, sql: statementsFor(opts.Schema, opts.NewestFirst, opts.DeadMan),
		from: opts.From, to: opts.To, floor: newFloor(opts.NewestFirst, grid), sharedOwner: sharedOwner,
		maxWorkCause: fmt.Errorf("%w (%s)", errMaxWork, opts.MaxWork),
	}
	if opts.CompletionWindow > 0 {
		q.merge = newMerger(q)
	}
	if q.from.IsZero() {
		q.from = slot.MinTime()
	}
	if q.to.IsZero() {
		q.to = slot.MaxTime()
	}
	// The first claims know the series' controls: the definition just
	// read says (a caller that read many at once passes them in ctx, so
	// opening many queues costs no statement each).
	q.ctl.last, q.ctl.when = controls{capped: def.MaxInFlight > 0, upstream: def.Upstream}, time.Now()
	return q, nil
}

// Rewind makes the queue's next acquisition search for AVAILABLE slots
// from the start of its range. An oldest-first queue searches from the
// earliest slot its last acquisition took (it does so on its own at least
// once a second, and whenever that search comes up short); call Rewind when
// told that slots before that may have become acquirable, by a re-open or a
// retry, so that they are taken first, also by the other processes
// working through the series (see the frontier's documentation).
func (q *Queue) Rewind() {
	q.floor.rewind()
	q.rewindFrontier()
}

// Owner returns the owner id written on this queue's leases.
func (q *Queue) Owner() uuid.UUID { return q.opts.Owner }

// budget limits how many connections of one pool locked mode holds at once.
type budget struct {
	slots chan struct{}
}

// budgets holds one budget per pool. The key is a weak pointer and the
// entry is removed when the pool is garbage collected, so programs that open
// pools per tenant do not accumulate them.
var budgets sync.Map // weak.Pointer[pgxpool.Pool] → *budget

func budgetFor(pool *pgxpool.Pool, reserve int) (*budget, error) {
	key := weak.Make(pool)
	if b, ok := budgets.Load(key); ok {
		return b.(*budget), nil
	}
	size := int(pool.Config().MaxConns) - reserve
	if size < 1 {
		return nil, fmt.Errorf("%w: MaxConns is %d and %d connections are reserved for finishing work; raise pool_max_conns to at least %d",
			ErrPoolTooSmall, pool.Config().MaxConns, reserve, reserve+1)
	}
	b, loaded := budgets.LoadOrStore(key, &budget{slots: make(chan struct{}, size)})
	if !loaded {
		runtime.AddCleanup(pool, func(k weak.Pointer[pgxpool.Pool]) { budgets.Delete(k) }, key)
	}
	return b.(*budget), nil
}

func (b *budget) acquire(ctx context.Context) error {
	select {
	case b.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *budget) release() { <-b.slots }
