// Command worker is one process of almanac's reliability suite (package
// internal/chaos, which builds and drives it). It works the slots of one
// series in one acquisition mode — locked (Queue.Run), batched locked
// (Queue.RunBatch) or lease (Queue.Claim, KeepAlive, Lease.CompleteTx) —
// or, with -series-count, runs the root package's engine (almanac.Client)
// with a job per series over many series in one of those modes (engine.go),
// and for every slot it holds it
//
//   - writes one effect row in the slot's transaction (the exactly-once
//     effect the suite counts), and
//   - records the attempt in a ledger over a separate autocommit pool:
//     start, end, pid, fence and outcome, so the suite can tell from the
//     outside which holders overlapped and which of them were refused.
//
// It is meant to be killed, frozen and cut off from its backends: it
// reconnects after server restarts, retries its ledger writes until they
// land, and exits 0 on SIGTERM after finishing or giving back what it
// holds. It exits at once, with status 3, when its standard input closes,
// so that a test binary that dies takes its workers with it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/seriesdb"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// The ledger and effect tables are created by the suite in the series'
// schema; their columns are documented there.
const (
	ledgerStart = `INSERT INTO {{schema}}.chaos_ledger (fence, name, slot_start, worker, pid, mode, owner, lease_until)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (fence) DO NOTHING`
	ledgerEnd = `UPDATE {{schema}}.chaos_ledger
SET ended = coalesce(ended, clock_timestamp()), outcome = $2, detail = $3, lease_until = coalesce($4, lease_until)
WHERE fence = $1`
	// ledgerAbort ends an attempt whose start may or may not have been
	// recorded: if the insert of ledgerStart is still in flight, it waits
	// for it (ON CONFLICT), and if it never lands, the attempt is recorded
	// as begun and ended now.
	ledgerAbort = `INSERT INTO {{schema}}.chaos_ledger (fence, name, slot_start, worker, pid, mode, ended, outcome, detail)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), 'aborted', $7)
ON CONFLICT (fence) DO UPDATE SET ended = coalesce(chaos_ledger.ended, clock_timestamp()),
    outcome = coalesce(chaos_ledger.outcome, 'aborted'), detail = coalesce(chaos_ledger.detail, $7)`
	effect = `INSERT INTO {{schema}}.chaos_effect (name, slot_start, fence) VALUES ($1, $2, $3)`
)

// skipReason marks the slots the suite expects to end SKIP.
const skipReason = "chaos: designated skip"

// errInjected is the handler failure the worker injects at -fail-rate.
var errInjected = errors.New("chaos: injected failure")

type config struct {
	db, ledgerDB, schema, series, interval string
	name, mode                             string
	from, to, matFrom, matTo               time.Time
	concurrency, seriesCount               int
	workMin, workMax                       time.Duration
	deadMan, leaseTTL                      time.Duration
	failRate                               float64
	skipEvery                              int64
	seed                                   uint64
}

func parseFlags() (config, error) {
	var c config
	var from, to, materialize string
	flag.StringVar(&c.db, "db", "", "connection URL for the engine's pool (may name a role with hostile settings)")
	flag.StringVar(&c.ledgerDB, "ledger-db", "", "connection URL for the ledger")
	flag.StringVar(&c.schema, "schema", "", "almanac schema")
	flag.StringVar(&c.series, "series", "", "series name (with -series-count, the prefix of the series' names)")
	flag.IntVar(&c.seriesCount, "series-count", 0, "run the root package's engine on this many series, <series>_0000 and on (0: work -series with acquire)")
	flag.StringVar(&c.interval, "interval", "", "series interval")
	flag.StringVar(&c.name, "name", "", "this worker's name in the ledger and in application_name")
	flag.StringVar(&c.mode, "mode", "", "locked, batch or lease")
	flag.StringVar(&from, "from", "", "first slot start to work (RFC 3339)")
	flag.StringVar(&to, "to", "", "end of the range to work (RFC 3339, exclusive)")
	flag.StringVar(&materialize, "materialize", "", "FROM/TO: a piece of the range to materialize at startup")
	flag.IntVar(&c.concurrency, "concurrency", 2, "goroutines working slots (the engine's Options.Concurrency)")
	flag.DurationVar(&c.workMin, "work-min", 100*time.Millisecond, "shortest handler run")
	flag.DurationVar(&c.workMax, "work-max", 300*time.Millisecond, "longest handler run")
	flag.DurationVar(&c.deadMan, "dead-man", 2*time.Second, "acquire.Policy.DeadMan")
	flag.DurationVar(&c.leaseTTL, "lease-ttl", 2*time.Second, "acquire.Policy.LeaseTTL")
	flag.Float64Var(&c.failRate, "fail-rate", 0, "fraction of handler runs that fail after writing their effect")
	flag.Int64Var(&c.skipEvery, "skip-every", 0, "slots whose grid index is a multiple of this end SKIP (0: none)")
	flag.Uint64Var(&c.seed, "seed", 0, "seed of this process's random choices")
	flag.Parse()

	var err error
	parse := func(text string) time.Time {
		t, perr := time.Parse(time.RFC3339Nano, text)
		err = errors.Join(err, perr)
		return t
	}
	c.from, c.to = parse(from), parse(to)
	if materialize != "" {
		lo, hi, _ := strings.Cut(materialize, "/")
		c.matFrom, c.matTo = parse(lo), parse(hi)
	}
	switch c.mode {
	case "locked", "batch", "lease":
	default:
		err = errors.Join(err, fmt.Errorf("-mode %q: expected locked, batch or lease", c.mode))
	}
	return c, err
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	// The suite keeps our stdin open for as long as it wants us alive.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("worker", cfg.name, "pid", os.Getpid())
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("worker failed", "error", err)
		os.Exit(1)
	}
}

type worker struct {
	cfg    config
	log    *slog.Logger
	pool   *pgxpool.Pool
	ledger *ledger
	queue  *acquire.Queue
	grid   slot.Series
	effect string
}

// reserve is the pool connections locked mode leaves free
// (acquire.Options.Reserve).
const reserve = 2

func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	if err := sqlschema.Check(cfg.schema); err != nil {
		return err
	}
	iv, err := slot.ParseInterval(cfg.interval)
	if err != nil {
		return err
	}
	app := "chaos-" + cfg.name
	// Locked mode holds one connection per goroutine; reserve more stay
	// free for lease writes and heartbeats, and one for materializing.
	pool, err := newPool(cfg.db, app, int32(cfg.concurrency+reserve+1), true)
	if err != nil {
		return err
	}
	defer pool.Close()
	ledgerPool, err := newPool(cfg.ledgerDB, app+"-ledger", int32(cfg.concurrency+1), false)
	if err != nil {
		return err
	}
	defer ledgerPool.Close()

	w := &worker{cfg: cfg, log: logger, pool: pool, effect: sqlschema.Render(effect, cfg.schema),
		ledger: &ledger{pool: ledgerPool, log: logger, worker: cfg.name, mode: cfg.mode,
			start: sqlschema.Render(ledgerStart, cfg.schema), end: sqlschema.Render(ledgerEnd, cfg.schema),
			abortSQL: sqlschema.Render(ledgerAbort, cfg.schema)}}
	if cfg.seriesCount > 0 {
		return w.runEngine(ctx, iv)
	}
	// The server may be restarting while we start: keep trying.
	err = retry(ctx, logger, "load the series", func() error {
		def, err := seriesdb.Get(ctx, pool, cfg.schema, cfg.series, iv)
		if err != nil {
			return err
		}
		w.grid = def.Grid
		w.queue, err = acquire.New(ctx, pool, def.Grid, acquire.Options{
			Schema: cfg.schema, From: cfg.from, To: cfg.to, Reserve: reserve, Logger: logger, Policy: cfg.policy(),
		})
		return err
	})
	if err != nil {
		return nil // shut down before starting
	}
	if !cfg.matFrom.IsZero() {
		// The workers materialize overlapping pieces of the range as they
		// start, all at once. A fault may cut this short; it is tried
		// again, and the suite checks that every slot of the range exists
		// once and none outside it.
		_ = retry(ctx, logger, "materialize", func() error {
			c, err := coverage.New(ctx, pool, w.grid, coverage.Options{Schema: cfg.schema, ChunkSize: 100})
			if err == nil {
				_, err = c.Materialize(ctx, cfg.matFrom, cfg.matTo, coverage.WriteOptions{})
			}
			return err
		})
	}

	var wg sync.WaitGroup
	for i := range cfg.concurrency {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
		wg.Go(func() {
			if cfg.mode == "lease" {
				w.leaseLoop(ctx, rng)
			} else {
				w.lockedLoop(ctx, rng)
			}
		})
	}
	wg.Wait()
	return nil
}

// policy is the acquisition policy of every mode: short holds, so that
// recovery fits in a CI run.
func (c config) policy() acquire.Policy {
	return acquire.Policy{
		MaxWork: 10 * c.workMax, DeadMan: c.deadMan, LeaseTTL: c.leaseTTL,
		// Frozen holders are taken over as soon as their lease ends, so
		// that every round exercises takeovers and fencing.
		TakeoverGrace: -1,
		Retry:         acquire.Exponential(100*time.Millisecond, 500*time.Millisecond, 0.5),
	}
}

func newPool(url, app string, maxConns int32, engine bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	if engine {
		acquire.ConfigurePool(cfg)
	}
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// retry runs fn until it succeeds or ctx is done, which it reports.
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("retrying", "what", what, "error", err)
		if sleep(ctx, wait) != nil {
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (w *worker) work(rng *rand.Rand) time.Duration {
	return w.cfg.workMin + time.Duration(rng.Int64N(int64(w.cfg.workMax-w.cfg.workMin)+1))
}

// skip reports whether s is one of the slots the suite expects to end SKIP:
// those whose grid index plus the number ending the series' name (0 for
// none) is a multiple of -skip-every. The suite's check has the same rule
// (designatedSkip), so that many series sharing one grid do not all skip
// the same starts.
func (w *worker) skip(s acquire.Slot) bool {
	if w.cfg.skipEvery <= 0 {
		return false
	}
	n, err := strconv.ParseInt(s.Name[strings.LastIndexByte(s.Name, '_')+1:], 10, 64)
	if err != nil {
		n = 0
	}
	return (s.Index+n)%w.cfg.skipEvery == 0
}

// idle waits before looking for work again: nothing was acquirable, or
// acquisition failed (the server may be restarting).
func idle(ctx context.Context, rng *rand.Rand) {
	_ = sleep(ctx, 50*time.Millisecond+time.Duration(rng.Int64N(int64(100*time.Millisecond))))
}

// lockedLoop works slots in locked mode: one at a time with Run, or
// batches of 2 to 6 with RunBatch.
func (w *worker) lockedLoop(ctx context.Context, rng *rand.Rand) {
	// Fences of the attempts this goroutine recorded in the ledger; the
	// handler runs on this goroutine, inside Run and RunBatch.
	started := map[int64]bool{}
	h := func(ctx context.Context, tx pgx.Tx, s acquire.Slot) error {
		if err := w.ledger.begin(ctx, s, uuid.Nil, time.Time{}); err != nil {
			return err
		}
		started[s.Fence] = true
		return w.lockedWork(ctx, tx, s, rng)
	}
	for ctx.Err() == nil {
		var results []acquire.Result
		var err error
		if w.cfg.mode == "batch" {
			results, err = w.queue.RunBatch(ctx, 2+rng.IntN(5), h)
		} else {
			var res acquire.Result
			var ok bool
			if res, ok, err = w.queue.Run(ctx, h); ok {
				results = []acquire.Result{res}
			}
		}
		for _, r := range results {
			if !started[r.Slot.Fence] {
				continue
			}
			delete(started, r.Slot.Fence)
			detail := ""
			if r.Err != nil {
				detail = r.Err.Error()
			}
			w.ledger.finish(ctx, r.Slot.Fence, string(r.Outcome), detail, time.Time{})
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn("locked run failed", "error", err)
		}
		if len(results) == 0 || err != nil {
			idle(ctx, rng)
		}
	}
}

// lockedWork is a locked-mode handler's work once its attempt is recorded:
// SKIP for the designated slots, else the effect in the slot's
// transaction, and at -fail-rate a failure after it.
func (w *worker) lockedWork(ctx context.Context, tx pgx.Tx, s acquire.Slot, rng *rand.Rand) error {
	if w.skip(s) {
		return acquire.Skip(skipReason)
	}
	// Half of the work waits in the worker, leaving the transaction
	// idle; half runs in the database. Neither may be cut short by the
	// role's idle-in-transaction or statement timeout.
	d := w.work(rng)
	if err := sleep(ctx, d/2); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, (d - d/2).Seconds()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, w.effect, s.Name, s.Start, s.Fence); err != nil {
		return err
	}
	if rng.Float64() < w.cfg.failRate {
		return errInjected // after the effect: its rollback is part of the test
	}
	return nil
}

// leaseLoop claims one or two slots at a time, keeps them alive while it
// works them one after the other, and completes each with CompleteTx.
func (w *worker) leaseLoop(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		leases, err := w.queue.Claim(ctx, 1+rng.IntN(2))
		if err != nil && ctx.Err() == nil {
			w.log.Warn("claim failed", "error", err)
		}
		if len(leases) == 0 {
			idle(ctx, rng)
			continue
		}
		stop := w.queue.KeepAlive(ctx, leases)
		for _, l := range leases {
			w.lease(ctx, rng, l)
		}
		stop()
	}
}

// lease works one leased slot and records how it ended. A holder that
// learns it lost the lease still tries to complete: the refusal of that
// stale write is what the suite checks.
func (w *worker) lease(ctx context.Context, rng *rand.Rand, l *acquire.Lease) {
	// Final writes must land even when shutdown has begun.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := w.ledger.begin(ctx, l.Slot, w.queue.Owner(), l.Until()); err != nil {
		// Shut down before the attempt was recorded: it never started.
		_ = l.Release(wctx)
		return
	}
	var outcome, detail string
	switch {
	case w.skip(l.Slot):
		_, _, serr := l.Finish(wctx, acquire.Skip(skipReason))
		outcome, detail = guarded("skip", serr)
	default:
		// The work ends early if the heartbeat finds the lease lost; we go
		// on to write anyway.
		lctx, stop := l.Context(ctx)
		_ = sleep(lctx, w.work(rng))
		stop()
		switch {
		case ctx.Err() != nil:
			outcome, detail = guarded("release", l.Release(wctx))
		case rng.Float64() < w.cfg.failRate:
			_, _, ferr := l.Finish(wctx, errInjected)
			outcome, detail = guarded("fail", ferr)
		default:
			outcome, detail = w.complete(wctx, l)
		}
	}
	w.ledger.finish(ctx, l.Fence, outcome, detail, l.Until())
}

// guarded names the outcome of a guarded lease write.
func guarded(done string, err error) (outcome, detail string) {
	switch {
	case err == nil:
		return done, ""
	case errors.Is(err, acquire.ErrLeaseLost):
		return "lost", err.Error()
	default:
		return "error", err.Error()
	}
}

// complete writes the effect and COMPLETE in one transaction of our own,
// begun with the role's defaults (the hostile role's are serializable with
// short timeouts), retrying what those defaults and restarts throw at it.
// A retry after a commit whose outcome is unknown is safe: the guard
// refuses it if the first commit went through.
func (w *worker) complete(ctx context.Context, l *acquire.Lease) (outcome, detail string) {
	uncertain := ""
	var err error
	for attempt := range 20 {
		if attempt > 0 && sleep(ctx, time.Duration(attempt)*50*time.Millisecond) != nil {
			break
		}
		var unknown bool
		unknown, err = w.completeOnce(ctx, l)
		switch {
		case err == nil:
			return "complete", uncertain
		case errors.Is(err, acquire.ErrLeaseLost) && uncertain != "":
			return "unknown", "lease lost after a commit of unknown outcome (" + uncertain + ")"
		case errors.Is(err, acquire.ErrLeaseLost):
			return "lost", err.Error()
		case unknown:
			uncertain = err.Error()
		}
	}
	if uncertain != "" {
		return "unknown", uncertain
	}
	return "error", fmt.Sprint(err)
}

func (w *worker) completeOnce(ctx context.Context, l *acquire.Lease) (unknown bool, err error) {
	// Our own dead-man switch, as locked mode has: frozen between the
	// completion and the commit, we must not keep the slot's row locked.
	// It is set in the round trip that begins the transaction: frozen
	// between a BEGIN and a SET of their own, we would hold an idle
	// transaction with no timeout.
	tx, err := w.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: fmt.Sprintf(
		"BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", w.cfg.deadMan.Milliseconds())})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := l.CompleteTx(ctx, tx); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, w.effect, l.Name, l.Start, l.Fence); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		// A server error means the commit was refused; anything else
		// (the connection broke) leaves it unknown.
		var pgErr *pgconn.PgError
		return !errors.As(err, &pgErr), err
	}
	return false, nil
}

// ledger records attempts over its own pool, in autocommit statements that
// are retried until they land: the record must outlive the slot's
// transaction and survive server restarts. Both writes are idempotent (the
// fence identifies the attempt), so a retry after an unknown outcome is
// harmless.
type ledger struct {
	pool         *pgxpool.Pool
	log          *slog.Logger
	worker, mode string
	start, end   string
	abortSQL     string
}

// begin records the start of the attempt holding s (s.Fence). It gives up
// only when ctx is done.
func (l *ledger) begin(ctx context.Context, s acquire.Slot, owner uuid.UUID, until time.Time) error {
	var ownerArg, untilArg any
	if owner != uuid.Nil {
		ownerArg, untilArg = owner, until
	}
	return retry(ctx, l.log, "ledger start", func() error {
		_, err := l.exec(ctx, l.start, s.Fence, s.Name, s.Start, l.worker, os.Getpid(), l.mode, ownerArg, untilArg)
		return err
	})
}

// finish records the end of the attempt holding fence, even after ctx is
// done (for at most 30 s).
func (l *ledger) finish(ctx context.Context, fence int64, outcome, detail string, until time.Time) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var untilArg any
	if !until.IsZero() {
		untilArg = until
	}
	if len(detail) > 500 {
		detail = detail[:500]
	}
	err := retry(wctx, l.log, "ledger end", func() error {
		_, err := l.exec(wctx, l.end, fence, outcome, detail, untilArg)
		return err
	})
	if err != nil {
		l.log.Error("ledger end not recorded", "fence", fence, "error", err)
	}
}

// abort ends the attempt holding s after begin failed: its context ended
// while the insert may have committed, or be committing still. The engine
// goes on to the job's next slot once the handler returns, and the suite
// must not see two attempts of one job running at once.
func (l *ledger) abort(ctx context.Context, s acquire.Slot, cause error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := retry(wctx, l.log, "ledger abort", func() error {
		_, err := l.exec(wctx, l.abortSQL, s.Fence, s.Name, s.Start, l.worker, os.Getpid(), l.mode, "begin: "+cause.Error())
		return err
	})
	if err != nil {
		l.log.Error("ledger abort not recorded", "fence", s.Fence, "error", err)
	}
}

func (l *ledger) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return l.pool.Exec(ctx, sql, args...)
}
