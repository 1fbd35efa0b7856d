package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
)

// The sustained scenario: batched locked-mode workers work for a long time
// on a cluster the bench starts itself with PostgreSQL's default settings
// (autovacuum on, nothing vacuumed by hand), while a feeder re-opens
// completed slots so that there is always work: the slot table is updated
// over and over, as a series whose late data keeps re-opening windows is.
// Each period it reports throughput, the slot table's size, the share of
// HOT updates, dead tuples and autovacuum runs; at the end it checks that
// every computation (a slot's generation) ran exactly once.

// SustainedOptions configure RunSustained.
type SustainedOptions struct {
	// Duration of the load. Required.
	Duration time.Duration
	// Period between reports. Default one minute.
	Period time.Duration
	// Warmup is how long the load runs before the first period starts:
	// the cluster is new and its caches cold. Default one period, at
	// most a minute; it is not part of Duration.
	Warmup time.Duration
	// Workers is the number of batched locked-mode workers. Default 8.
	Workers int
	// Quick works a small window of slots (for tests).
	Quick bool
	// Settings are added to the cluster's postgresql.conf; by default it
	// runs with PostgreSQL's defaults.
	Settings []ServerSetting
	// OnPeriod, if set, is called with every period as soon as it ends.
	OnPeriod func(Period)
	// Progress, if set, is told every second how far the load has got, in
	// seconds.
	Progress func(scenario string, done, total int64)
}

// Period is what one reporting period of the sustained scenario measured.
type Period struct {
	// Index numbers the periods from 1.
	Index   int     `json:"period"`
	Seconds float64 `json:"seconds"`
	// SlotsPerSecond is the slots whose handler ran and whose transaction
	// committed in the period, per second.
	SlotsPerSecond float64 `json:"slots_per_second"`
	// SlotBytes is the slot table with its indexes and TOAST at the end of
	// the period; HeapBytes and IndexBytes split it.
	SlotBytes  int64 `json:"slot_bytes"`
	HeapBytes  int64 `json:"heap_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// HistoryBytes is the slots' history table (slot_event), which every
	// re-open appends to.
	HistoryBytes int64 `json:"history_bytes"`
	// HOTRatio is the share of the period's updates of the slot table that
	// were HOT (no index entry written).
	HOTRatio float64 `json:"hot_ratio"`
	// DeadTuples and LiveTuples are the slot table's, as the statistics
	// collector last counted them.
	DeadTuples int64 `json:"dead_tuples"`
	LiveTuples int64 `json:"live_tuples"`
	// Autovacuums is how many times autovacuum has vacuumed the slot table
	// since the start.
	Autovacuums int64 `json:"autovacuums"`
	// WALPerSlot is the WAL the cluster wrote in the period, in bytes, per
	// slot run; Checkpoints the checkpoints that began in it. With the
	// default max_wal_size the load checkpoints several times a minute,
	// and the full-page images after each are much of its WAL.
	WALPerSlot  float64 `json:"wal_bytes_per_slot"`
	Checkpoints int64   `json:"checkpoints"`
	// PageImagesPerSlot is the full-page images the cluster wrote to WAL
	// in the period per slot run (pg_stat_wal, PostgreSQL 14 and later;
	// 0 before): the first change of a page after a checkpoint logs the
	// whole page, up to 8 kB, so this is what checkpoints cost the load.
	PageImagesPerSlot float64 `json:"page_images_per_slot"`
	// EmptyBatches is the share of the workers' batches in the period that
	// found no slot to run. Near 0 the workers are the limit; far from it
	// they wait for the feeder's re-opens, which are the limit: a series'
	// re-opens run one at a time.
	EmptyBatches float64 `json:"empty_batches"`
}

// Line prints the period on one line.
func (p Period) Line() string {
	return fmt.Sprintf("period %3d  %8.0f slots/s  slot table %7.1f MiB (heap %.1f, indexes %.1f)  history %6.1f MiB  HOT %4.1f%%  dead %9d  live %9d  autovacuums %d  WAL %5.0f B/slot  page images %.3f/slot  checkpoints %d  empty batches %4.1f%%",
		p.Index, p.SlotsPerSecond, mib(p.SlotBytes), mib(p.HeapBytes), mib(p.IndexBytes), mib(p.HistoryBytes), 100*p.HOTRatio, p.DeadTuples, p.LiveTuples, p.Autovacuums,
		p.WALPerSlot, p.PageImagesPerSlot, p.Checkpoints, 100*p.EmptyBatches)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// SustainedReport is the outcome of RunSustained.
type SustainedReport struct {
	Server    string   `json:"server"`
	DurationS float64  `json:"duration_seconds"`
	PeriodS   float64  `json:"period_seconds"`
	WarmupS   float64  `json:"warmup_seconds"`
	Workers   int      `json:"workers"`
	Window    int      `json:"window_slots"`
	Periods   []Period `json:"periods,omitempty"`
	// Runs counts handler runs; Reopened the slots the feeder re-opened.
	Runs     int64 `json:"runs"`
	Reopened int64 `json:"reopened"`
	// ExactlyOnce is set when every slot ran once per re-open, no
	// generation twice, and all ended COMPLETE.
	ExactlyOnce bool `json:"exactly_once"`
	// MaxDeviation is the largest |period − first| / first of the full
	// periods' throughput; Stable says it is within 10 %.
	MaxDeviation float64 `json:"max_deviation"`
	Stable       bool    `json:"stable"`
	// Autovacuum is the cluster's autovacuum setting, for the record.
	Autovacuum string `json:"autovacuum"`
	// Settings are the settings given for the cluster, as name=value with
	// the value the server reports; none means PostgreSQL's defaults.
	Settings []string `json:"server_settings,omitempty"`
	Remarks  []string `json:"remarks,omitempty"`
}

// settings says what the cluster's settings were.
func (r SustainedReport) settings() string {
	if len(r.Settings) == 0 {
		return "PostgreSQL's defaults"
	}
	return "defaults but " + strings.Join(r.Settings, ", ")
}

// Summary prints the report's conclusion in a few lines.
func (r SustainedReport) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sustained: %s after a warm-up of %s, %d batched locked workers over a window of %s slots, PostgreSQL %s, autovacuum %s\n",
		time.Duration(r.DurationS*float64(time.Second)).Round(time.Second), time.Duration(r.WarmupS*float64(time.Second)).Round(time.Second),
		r.Workers, count(r.Window), r.Server, r.Autovacuum)
	fmt.Fprintf(&b, "server settings: %s\n", r.settings())
	fmt.Fprintf(&b, "handler runs %d, slots re-opened %d, exactly once: %v\n", r.Runs, r.Reopened, r.ExactlyOnce)
	stable := "no"
	if r.Stable {
		stable = "yes"
	}
	fmt.Fprintf(&b, "throughput per period within 10%% of the first: %s (largest deviation %.1f%%)", stable, 100*r.MaxDeviation)
	if len(r.Periods) > 0 {
		first, last := r.Periods[0], r.Periods[len(r.Periods)-1]
		fmt.Fprintf(&b, "\nslot table %.1f → %.1f MiB, history %.1f → %.1f MiB, autovacuums %d",
			mib(first.SlotBytes), mib(last.SlotBytes), mib(first.HistoryBytes), mib(last.HistoryBytes), last.Autovacuums)
	}
	for _, n := range r.Remarks {
		b.WriteString("\n" + n)
	}
	return b.String()
}

// sustainedSizes are the window of slots re-opened in turn, the slots per
// re-open, and the backlog below which the feeder re-opens more.
type sustainedSizes struct{ window, chunk, backlog int }

var (
	sustainedFull  = sustainedSizes{window: 1_000_000, chunk: 10_000, backlog: 50_000}
	sustainedQuick = sustainedSizes{window: 20_000, chunk: 1_000, backlog: 2_000}
)

// RunSustained starts a cluster, runs the load for opts.Duration, and
// returns the periods measured, also given to OnPeriod as they end. An
// error means the run could not go on (the cluster, a database error) or a
// computation ran twice or never; the report then holds what was measured.
// A cancelled ctx ends the load early and still checks exactly-once.
func RunSustained(ctx context.Context, opts SustainedOptions) (SustainedReport, error) {
	if opts.Duration <= 0 {
		return SustainedReport{}, fmt.Errorf("%w: sustained duration %s", ErrInvalid, opts.Duration)
	}
	if opts.Period <= 0 {
		opts.Period = time.Minute
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Warmup <= 0 {
		opts.Warmup = min(opts.Period, time.Minute)
	}
	size := sustainedFull
	if opts.Quick {
		size = sustainedQuick
	}
	rep := SustainedReport{DurationS: opts.Duration.Seconds(), PeriodS: opts.Period.Seconds(), WarmupS: opts.Warmup.Seconds(),
		Workers: opts.Workers, Window: size.window}
	setupCtx := context.WithoutCancel(ctx)
	cl, err := startCluster(setupCtx, opts.Settings)
	if err != nil {
		return rep, fmt.Errorf("sustained: start a cluster: %w", err)
	}
	defer cl.stop()
	cfg, err := pgxpool.ParseConfig(cl.url())
	if err != nil {
		return rep, err
	}
	cfg.MaxConns = int32(opts.Workers + reserve + 4)
	pool, err := pgxpool.NewWithConfig(setupCtx, cfg)
	if err != nil {
		return rep, fmt.Errorf("sustained: connect: %w", err)
	}
	defer pool.Close()
	if err := warm(setupCtx, pool); err != nil {
		return rep, err
	}
	e := &env{repeats: 1, workers: opts.Workers, admin: pool, canCheckpoint: true}
	var serverNum int
	if err := pool.QueryRow(setupCtx, "SELECT current_setting('server_version'), current_setting('autovacuum'), current_setting('server_version_num')::int").
		Scan(&rep.Server, &rep.Autovacuum, &serverNum); err != nil {
		return rep, err
	}
	for _, st := range opts.Settings {
		// As the server reads it: proof that it took.
		var v string
		if err := pool.QueryRow(setupCtx, "SELECT current_setting($1)", st.Name).Scan(&v); err != nil {
			return rep, fmt.Errorf("sustained: server setting %s: %w", st.Name, err)
		}
		rep.Settings = append(rep.Settings, ServerSetting{Name: st.Name, Value: v}.String())
	}
	s, err := e.newSchema(setupCtx, "sustained")
	if err != nil {
		return rep, err
	}
	grid, err := s.series(setupCtx, "bench")
	if err != nil {
		return rep, err
	}
	if err := s.load(setupCtx, grid, size.window, "COMPLETE"); err != nil {
		return rep, err
	}
	if err := s.vacuum(setupCtx); err != nil {
		return rep, err
	}
	q, err := acquire.New(setupCtx, pool, grid, acquire.Options{Schema: s.name, Reserve: reserve})
	if err != nil {
		return rep, err
	}
	cov, err := coverage.New(setupCtx, pool, grid, coverage.Options{Schema: s.name})
	if err != nil {
		return rep, err
	}

	l := &load{s: s, q: q, cov: cov, size: size, idle: idlePoll, runs: make([]atomic.Int32, size.window), last: make([]atomic.Int64, size.window),
		checkpoints: `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`, pageImages: `SELECT 0`}
	if serverNum >= 170000 {
		l.checkpoints = `SELECT num_timed + num_requested FROM pg_stat_checkpointer`
	}
	if serverNum >= 140000 {
		l.pageImages = `SELECT wal_fpi FROM pg_stat_wal`
	}
	for k := range l.last {
		l.last[k].Store(1) // loaded COMPLETE: generation 1 ran before the bench
	}
	err = l.run(ctx, opts, &rep)
	rep.Runs, rep.Reopened = l.done.Load(), l.reopened.Load()
	rep.MaxDeviation, rep.Stable = stability(rep.Periods)
	if err != nil {
		return rep, err
	}
	if err := l.verify(setupCtx); err != nil {
		return rep, err
	}
	rep.ExactlyOnce = true
	return rep, nil
}

// load is the state of a sustained run.
type load struct {
	s    *schema
	q    *acquire.Queue
	cov  *coverage.Client
	size sustainedSizes

	// checkpoints is the query counting the cluster's checkpoints, which
	// PostgreSQL 17 moved from pg_stat_bgwriter to pg_stat_checkpointer;
	// pageImages the one counting full-page images written to WAL.
	checkpoints, pageImages string

	runs     []atomic.Int32 // handler runs per slot
	last     []atomic.Int64 // the last generation run per slot
	twice    atomic.Int64   // runs of a generation that had run already
	reopens  wakeup         // fired after every re-open commits
	idle     time.Duration  // the longest an idle worker waits for one (idlePoll)
	done     atomic.Int64   // committed handler runs
	batches  atomic.Int64   // RunBatch calls
	empty    atomic.Int64   // RunBatch calls that found nothing to do
	reopened atomic.Int64
}

// handler records the run of a generation of a slot.
func (l *load) handler(_ context.Context, _ pgx.Tx, s acquire.Slot) error {
	k := index(s.Start)
	if k < 0 || k >= len(l.runs) {
		l.twice.Add(1)
		return nil
	}
	if prev := l.last[k].Swap(s.Generation); prev >= s.Generation {
		l.twice.Add(1)
	}
	l.runs[k].Add(1)
	return nil
}

// run works the load until opts.Duration has passed or ctx is done, then
// stops feeding and drains what is left.
func (l *load) run(ctx context.Context, opts SustainedOptions, rep *SustainedReport) error {
	loadCtx, stopLoad := context.WithTimeout(ctx, opts.Warmup+opts.Duration)
	defer stopLoad()
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var feeding atomic.Bool
	feeding.Store(true)
	errs := make(chan error, opts.Workers+2)
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Go(func() {
			err := l.work(workCtx, &feeding, func(ctx context.Context) (int, error) {
				results, err := l.q.RunBatch(ctx, batchSize, l.handler)
				return len(results), err
			})
			if err != nil && workCtx.Err() == nil {
				errs <- err
				stopWork()
			}
		})
	}
	var feeder sync.WaitGroup
	feeder.Go(func() {
		if err := l.feed(loadCtx); err != nil && loadCtx.Err() == nil {
			errs <- err
			stopWork()
		}
	})
	sampleErr := l.sample(loadCtx, workCtx, opts, rep)
	feeder.Wait()
	feeding.Store(false)
	l.reopens.fire() // the idle workers look once more, and stop
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if sampleErr != nil && workCtx.Err() == nil {
		all = append(all, sampleErr)
	}
	return errors.Join(all...)
}

// work is one worker of the load: it runs batch (which returns how many
// slots it ran) until a batch begun after feeding stopped finds nothing,
// ctx is done, or a batch fails.
func (l *load) work(ctx context.Context, feeding *atomic.Bool, batch func(context.Context) (int, error)) error {
	for {
		// Both read before the batch. An empty batch ends the drain only
		// if it began after the last re-open had committed: one that
		// began before may have searched before that commit (its
		// statements' snapshots predate it), and when every worker's last
		// batch was such a one, the last chunk was left unrun (a 6-minute
		// run failed so, 10,000 slots short). And a re-open that commits
		// after the batch's search began wakes the worker.
		fed, woken := feeding.Load(), l.reopens.next()
		n, err := batch(ctx)
		if err != nil {
			return err
		}
		l.done.Add(int64(n))
		l.batches.Add(1)
		if n > 0 {
			continue
		}
		l.empty.Add(1)
		if !fed {
			return nil
		}
		// Idle until the next re-open, as a scheduler's worker waits for
		// the re-open's notification: polling in a loop took the CPU the
		// re-opens needed (a third of the batches found nothing, on two
		// cores).
		select {
		case <-ctx.Done():
			return nil
		case <-woken:
		case <-time.After(l.idle):
		}
	}
}

// idlePoll is how long a sustained worker that found nothing waits for a
// re-open before it looks again anyway, as a scheduler polls.
const idlePoll = 100 * time.Millisecond

// wakeup tells goroutines waiting on next that something happened since
// they called it.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns a channel closed at the next fire.
func (w *wakeup) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *wakeup) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// feed re-opens the next chunk of the window whenever fewer than
// size.backlog slots wait, until ctx is done.
func (l *load) feed(ctx context.Context) error {
	next := 0
	for ctx.Err() == nil {
		backlog, err := l.s.count(ctx, `SELECT count(*) FROM {{schema}}.slot WHERE status = 'AVAILABLE'`)
		if err != nil {
			return err
		}
		if backlog >= int64(l.size.backlog) {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		// Not cancelled midway: a re-open that commits is always counted.
		res, err := l.cov.Reopen(context.WithoutCancel(ctx), at(next), at(next+l.size.chunk),
			coverage.WriteOptions{Reason: "bench", States: []string{"COMPLETE"}})
		if err != nil {
			return err
		}
		l.reopened.Add(res.Changed)
		l.reopens.fire()
		next = (next + l.size.chunk) % l.size.window
	}
	return nil
}

// tableStats are the slot table's cumulative statistics.
type tableStats struct {
	updates, hot, dead, live, autovacuums int64
	// wal is the cluster's WAL position in bytes; checkpoints counts the
	// checkpoints begun since the statistics were reset, pageImages the
	// full-page images written to WAL.
	wal, checkpoints, pageImages int64
}

func (l *load) stats(ctx context.Context) (tableStats, Period, error) {
	var st tableStats
	var p Period
	err := l.s.e.admin.QueryRow(ctx, `SELECT coalesce(n_tup_upd, 0), coalesce(n_tup_hot_upd, 0), coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0),
			coalesce(autovacuum_count, 0), pg_total_relation_size(relid), pg_relation_size(relid), pg_indexes_size(relid),
			pg_total_relation_size(to_regclass($2)), (pg_current_wal_lsn() - '0/0')::bigint, (`+l.checkpoints+`), (`+l.pageImages+`)
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'slot'`, l.s.name, quote(l.s.name)+".slot_event").
		Scan(&st.updates, &st.hot, &st.dead, &st.live, &st.autovacuums, &p.SlotBytes, &p.HeapBytes, &p.IndexBytes, &p.HistoryBytes,
			&st.wal, &st.checkpoints, &st.pageImages)
	if err != nil {
		return st, p, fmt.Errorf("statistics: %w", err)
	}
	p.DeadTuples, p.LiveTuples, p.Autovacuums = st.dead, st.live, st.autovacuums
	return st, p, nil
}

// sample reports a Period every opts.Period until loadCtx is done, and a
// last, shorter one if at least a fifth of a period remains.
func (l *load) sample(loadCtx, workCtx context.Context, opts SustainedOptions, rep *SustainedReport) error {
	select {
	case <-loadCtx.Done():
		return nil
	case <-workCtx.Done():
		return workCtx.Err()
	case <-time.After(opts.Warmup):
	}
	prev, _, err := l.stats(workCtx)
	if err != nil {
		return err
	}
	start := time.Now()
	periodStart, doneAtStart := start, l.done.Load()
	batchesAtStart, emptyAtStart := l.batches.Load(), l.empty.Load()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	total := int64(opts.Duration / time.Second)
	for {
		var end bool
		select {
		case <-loadCtx.Done():
			end = true
		case <-workCtx.Done():
			return workCtx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if opts.Progress != nil && !end {
			opts.Progress("sustained", int64(now.Sub(start)/time.Second), total)
		}
		elapsed := now.Sub(periodStart)
		if elapsed < opts.Period && !(end && elapsed >= opts.Period/5) {
			if end {
				return nil
			}
			continue
		}
		done := l.done.Load()
		st, p, err := l.stats(workCtx)
		if err != nil {
			return err
		}
		p.Index, p.Seconds = len(rep.Periods)+1, elapsed.Seconds()
		p.SlotsPerSecond = float64(done-doneAtStart) / elapsed.Seconds()
		batches, empty := l.batches.Load(), l.empty.Load()
		if batches > batchesAtStart {
			p.EmptyBatches = float64(empty-emptyAtStart) / float64(batches-batchesAtStart)
		}
		if upd := st.updates - prev.updates; upd > 0 {
			p.HOTRatio = float64(st.hot-prev.hot) / float64(upd)
		}
		if done > doneAtStart {
			p.WALPerSlot = float64(st.wal-prev.wal) / float64(done-doneAtStart)
			p.PageImagesPerSlot = float64(st.pageImages-prev.pageImages) / float64(done-doneAtStart)
		}
		p.Checkpoints = st.checkpoints - prev.checkpoints
		rep.Periods = append(rep.Periods, p)
		if opts.OnPeriod != nil {
			opts.OnPeriod(p)
		}
		prev, periodStart, doneAtStart = st, now, done
		batchesAtStart, emptyAtStart = batches, empty
		if end {
			return nil
		}
	}
}

// verify checks, once the load has drained, that every slot is COMPLETE
// and ran once per re-open: runs = generation − 1 (generation 1 was loaded
// COMPLETE), and no generation ran twice.
func (l *load) verify(ctx context.Context) error {
	rows, err := l.s.e.admin.Query(ctx, render(`SELECT slot_start, generation, status FROM {{schema}}.slot`, l.s.name))
	if err != nil {
		return err
	}
	var wrong, notComplete, seen int
	var examples []string
	for rows.Next() {
		var start time.Time
		var gen int64
		var status string
		if err := rows.Scan(&start, &gen, &status); err != nil {
			rows.Close()
			return err
		}
		seen++
		k := index(start)
		if status != "COMPLETE" {
			notComplete++
		}
		if k < 0 || k >= len(l.runs) || int64(l.runs[k].Load()) != gen-1 {
			wrong++
			if len(examples) < 3 && k >= 0 && k < len(l.runs) {
				examples = append(examples, fmt.Sprintf("slot %d: generation %d, %d runs", k, gen, l.runs[k].Load()))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if twice := l.twice.Load(); wrong > 0 || notComplete > 0 || twice > 0 || seen != len(l.runs) {
		return fmt.Errorf("%w: sustained: %d of %d slots with runs ≠ re-opens (%s), %d not COMPLETE, %d generations run twice",
			ErrNotExactlyOnce, wrong, seen, strings.Join(examples, "; "), notComplete, twice)
	}
	return nil
}

// stability returns the largest relative deviation of a full period's
// throughput from the first period's, and whether it is within 10 %. A
// last period shorter than the others is left out.
func stability(periods []Period) (float64, bool) {
	if len(periods) == 0 {
		return 0, false
	}
	first := periods[0]
	worst := 0.0
	for _, p := range periods[1:] {
		if p.Seconds < 0.9*first.Seconds {
			continue
		}
		worst = math.Max(worst, math.Abs(p.SlotsPerSecond-first.SlotsPerSecond)/first.SlotsPerSecond)
	}
	return worst, worst <= 0.10
}
