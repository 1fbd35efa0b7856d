//go:build linux

package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/almanacdev/almanac/acquire"
	"github.com/almanacdev/almanac/coverage"
	"github.com/almanacdev/almanac/internal/sqlschema"
	"github.com/almanacdev/almanac/slot"
)

// Fault kinds, in the order the summary lists them.
const (
	faultKill             = "kill"
	faultStop             = "stop"
	faultTerminate        = "terminate"
	faultReopen           = "reopen"
	faultMaterialize      = "materialize"
	faultRestartFast      = "restart-fast"
	faultRestartImmediate = "restart-immediate"
	faultUpstream         = "upstream-reopen"
)

var faultKinds = []string{faultKill, faultStop, faultTerminate, faultReopen, faultMaterialize, faultRestartFast, faultRestartImmediate, faultUpstream}

// plannedFault is a fault drawn from the seed: what, when (as progress, so
// faults land while slots are being worked whatever the machine's speed),
// and the random choices it makes, drawn up front so that the plan is a
// function of the seed alone.
type plannedFault struct {
	kind string
	// at is the share of the range done (COMPLETE or SKIP) when it fires.
	at float64
	// mode is the kind of worker a stop freezes.
	mode string
	// pick chooses the victim, or where a range goes; pause is how long a
	// killed worker stays down.
	pick, pick2 float64
	pause       time.Duration
}

func (r *round) plan() []plannedFault {
	between := func(lo, hi float64) float64 { return lo + r.rng.Float64()*(hi-lo) }
	var plan []plannedFault
	add := func(kind string, lo, hi float64, mode string) {
		plan = append(plan, plannedFault{kind: kind, at: between(lo, hi), mode: mode, pick: r.rng.Float64(), pick2: r.rng.Float64(),
			pause: time.Duration(between(200, 1000)) * time.Millisecond})
	}
	if r.sc.deps {
		// Upstream re-opens while workers are killed and frozen, no
		// server restart (the other tests' rounds have them).
		for range 6 {
			add(faultUpstream, 0.05, 0.9, "")
		}
		for range 4 {
			add(faultKill, 0.02, 0.9, "")
		}
		for _, mode := range []string{"locked", "batch", "lease"} {
			add(faultStop, 0.05, 0.85, mode)
		}
		add(faultTerminate, 0.02, 0.9, "")
		add(faultReopen, 0.3, 0.85, "")
		add(faultMaterialize, 0.1, 0.35, "")
	} else {
		for range 6 {
			add(faultKill, 0.02, 0.9, "")
		}
		for _, mode := range []string{"locked", "batch", "lease"} {
			add(faultStop, 0.05, 0.85, mode)
		}
		for range 4 {
			add(faultTerminate, 0.02, 0.9, "")
		}
		for range 2 {
			add(faultReopen, 0.3, 0.85, "")
		}
		// Before the workers run out of the first part of the range. The
		// engines of a many-series round materialize their ranges
		// themselves.
		if !r.sc.engine {
			add(faultMaterialize, 0.1, 0.35, "")
		}
		add(faultRestartFast, 0.15, 0.45, "")
		add(faultRestartImmediate, 0.5, 0.85, "")
	}
	slices.SortStableFunc(plan, func(a, b plannedFault) int { return cmp.Compare(a.at, b.at) })
	return plan
}

// fault is one injected fault as it happened.
type fault struct {
	kind       string
	began, end time.Time
	pid        int // kill, stop: the process
	detail     string
	err        error
}

type faultLog struct {
	mu     sync.Mutex
	faults []fault
}

func (l *faultLog) add(f fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

func (l *faultLog) all() []fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.faults)
}

// inject fires the plan as the workers make progress, waits for every
// fault to end (frozen workers resumed, killed ones restarted, the server
// back), and returns when the last one ended.
func (r *round) inject(plan []plannedFault) (time.Time, error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	began := time.Now()
	last, lastChange := -1, began
	for len(plan) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, done, err := r.counts(ctx)
		cancel()
		switch {
		case err != nil: // the server is restarting
		case done != last:
			last, lastChange = done, time.Now()
		}
		if time.Since(began) > phaseBound {
			return time.Time{}, fmt.Errorf("faults not over %s after the start, at %d of %d slots done, with %d fault(s) still planned\n%s",
				phaseBound, last, r.sc.slots(), len(plan), r.openSlots())
		}
		if time.Since(lastChange) > stallBound {
			return time.Time{}, fmt.Errorf("no progress for %s at %d of %d slots done, with %d fault(s) still planned\n%s",
				stallBound, last, r.sc.slots(), len(plan), r.openSlots())
		}
		for len(plan) > 0 && plan[0].at*float64(r.sc.slots()) <= float64(last) {
			f := plan[0]
			plan = plan[1:]
			wg.Go(func() { r.fire(f) })
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	var end time.Time
	for _, f := range r.faults.all() {
		if f.end.After(end) {
			end = f.end
		}
	}
	return end, nil
}

func (r *round) fire(f plannedFault) {
	rec := fault{kind: f.kind, began: time.Now()}
	switch f.kind {
	case faultKill:
		rec.pid, rec.detail, rec.err = r.kill(f)
	case faultStop:
		rec.pid, rec.detail, rec.err = r.stop(f)
	case faultTerminate:
		rec.detail, rec.err = r.terminate(f)
	case faultReopen:
		rec.detail, rec.err = r.reopen(f)
	case faultMaterialize:
		rec.detail, rec.err = r.materialize(f)
	case faultUpstream:
		rec.detail, rec.err = r.reopenUpstream(f)
	case faultRestartFast:
		rec.detail, rec.err = r.restartServer("fast")
	case faultRestartImmediate:
		rec.detail, rec.err = r.restartServer("immediate")
	}
	rec.end = time.Now()
	r.faults.add(rec)
}

// holders returns the pids of workers that have an attempt open in the
// ledger, the best victims.
func (r *round) holders() map[int]bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := r.admin.Query(ctx, sqlschema.Render(`SELECT DISTINCT pid FROM {{schema}}.chaos_ledger WHERE ended IS NULL`, r.schema))
	if err != nil {
		return nil // the server is restarting: any victim will do
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	m := map[int]bool{}
	for _, p := range pids {
		m[int(p)] = true
	}
	return m
}

// kill SIGKILLs a worker, preferably one holding a slot, and restarts it
// after a pause.
func (r *round) kill(f plannedFault) (int, string, error) {
	p := r.fleet.pick("", r.holders(), f.pick)
	if p == nil {
		return 0, "no worker free to kill", nil
	}
	if err := r.fleet.kill(p); err != nil {
		return p.pid, "", err
	}
	time.Sleep(f.pause)
	return p.pid, fmt.Sprintf("%s pid %d, restarted after %s", p.spec.name, p.pid, f.pause), r.fleet.start(p.spec)
}

// stop freezes a worker of the planned mode, preferably one holding a slot,
// past its lease and the dead-man timeout, then lets it continue. A frozen
// lease-mode worker also has the slot it is working on ejected, so that it
// wakes up while another holder has that slot: its stale write must then
// be refused.
func (r *round) stop(f plannedFault) (int, string, error) {
	p := r.fleet.pick(f.mode, r.holders(), f.pick)
	if p == nil {
		return 0, "no " + f.mode + " worker free to stop", nil
	}
	defer r.fleet.release(p)
	if err := r.fleet.signal(p, syscall.SIGSTOP); err != nil {
		return p.pid, "", err
	}
	detail := fmt.Sprintf("%s pid %d frozen for %s", p.spec.name, p.pid, freeze)
	var ej *ejection
	var errs []error
	if p.spec.mode == "lease" {
		var err error
		if ej, err = r.eject(p); err != nil {
			errs = append(errs, fmt.Errorf("eject: %w", err))
		} else if ej != nil {
			detail += fmt.Sprintf(", its slot %s ejected (fence %d -> %d)", ej.lease.Start.UTC().Format(time.RFC3339), ej.from, ej.lease.Fence)
		}
	}
	time.Sleep(freeze)
	held, err := r.stillHeld(p)
	if err != nil {
		detail += fmt.Sprintf(" (not checked whether it still held slots: %v)", err)
	}
	errs = append(errs, held, r.fleet.signal(p, syscall.SIGCONT))
	if ej != nil {
		outcome, err := ej.finish(r)
		detail += ", ejected lease " + outcome
		errs = append(errs, err)
	}
	return p.pid, detail, errors.Join(errs...)
}

// ejection is a slot the suite took from a frozen lease holder.
type ejection struct {
	queue *acquire.Queue
	lease *acquire.Lease
	from  int64 // the frozen holder's fence
	pid   int
	stop  func() // the lease's heartbeat
}

// eject takes the slot the frozen lease worker p is working on with
// Queue.Eject (the "a callback arrived, act now" case), records the new
// hold in the ledger as mode "eject", and keeps it alive. It returns nil if
// p holds no slot it has started.
func (r *round) eject(p *proc) (*ejection, error) {
	// The outcome of each write must be known: no restart meanwhile.
	r.restart.RLock()
	defer r.restart.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var name string
	var start time.Time
	var from int64
	err := r.admin.QueryRow(ctx, sqlschema.Render(`SELECT l.name, l.slot_start, l.fence FROM {{schema}}.chaos_ledger l
		JOIN {{schema}}.slot s ON s.name = l.name AND s."interval" = $2 AND s.slot_start = l.slot_start AND s.fence = l.fence AND s.status = 'ACQUIRED'
		WHERE l.pid = $1 AND l.ended IS NULL ORDER BY l.fence LIMIT 1`, r.schema), p.pid, interval).Scan(&name, &start, &from)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	q, err := acquire.New(ctx, r.admin, r.sc.byName[name], acquire.Options{Schema: r.schema, Policy: acquire.Policy{LeaseTTL: leaseTTL}})
	if err != nil {
		return nil, err
	}
	l, err := q.Eject(ctx, start)
	if errors.Is(err, acquire.ErrNotHeld) || errors.Is(err, acquire.ErrHeld) {
		return nil, nil // finished just before the freeze
	}
	if err != nil {
		return nil, err
	}
	_, err = r.admin.Exec(ctx, sqlschema.Render(`INSERT INTO {{schema}}.chaos_ledger (fence, name, slot_start, worker, pid, mode, owner, lease_until)
		VALUES ($1, $2, $3, 'suite', $4, 'eject', $5, $6)`, r.schema), l.Fence, name, l.Start, os.Getpid(), q.Owner(), l.Until())
	if err != nil {
		return nil, err
	}
	return &ejection{queue: q, lease: l, from: from, pid: p.pid, stop: q.KeepAlive(context.Background(), []*acquire.Lease{l})}, nil
}

// finish waits for the woken holder to try its stale write (its ledger
// entry ends), then gives the ejected slot back for the workers to do, and
// records how that went.
func (e *ejection) finish(r *round) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var ended bool
		err := r.admin.QueryRow(ctx, sqlschema.Render(`SELECT ended IS NOT NULL FROM {{schema}}.chaos_ledger WHERE fence = $1`, r.schema),
			e.from).Scan(&ended)
		if ended || ctx.Err() != nil {
			break
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			r.t.Logf("seed %d: waiting for the ejected holder: %v", r.seed, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.stop()
	r.restart.RLock()
	defer r.restart.RUnlock()
	outcome, detail := "release", ""
	if err := e.lease.Release(ctx); errors.Is(err, acquire.ErrLeaseLost) {
		outcome, detail = "lost", err.Error()
	} else if err != nil {
		outcome, detail = "error", err.Error()
	}
	_, err := r.admin.Exec(ctx, sqlschema.Render(`UPDATE {{schema}}.chaos_ledger SET ended = clock_timestamp(), outcome = $2, detail = $3,
		lease_until = $4 WHERE fence = $1`, r.schema), e.lease.Fence, outcome, detail, e.lease.Until())
	return outcome, err
}

// stillHeld checks, while p is frozen, that it holds nothing any more:
// PostgreSQL has ended its transactions idle for longer than the dead-man
// timeout, and its leases have expired. It returns a non-nil held if not,
// and err if it could not tell (the server restarted meanwhile).
func (r *round) stillHeld(p *proc) (held, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var idle, leases int
	err = r.admin.QueryRow(ctx, sqlschema.Render(`SELECT
		(SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'
			AND state_change < clock_timestamp() - $2 * interval '1 millisecond'),
		(SELECT count(*) FROM {{schema}}.slot WHERE status = 'ACQUIRED' AND lease_until > clock_timestamp()
			AND owner IN (SELECT owner FROM {{schema}}.chaos_ledger WHERE pid = $3))`, r.schema),
		"chaos-"+p.spec.name, (deadMan+time.Second).Milliseconds(), p.pid).Scan(&idle, &leases)
	if err != nil {
		return nil, err
	}
	if idle > 0 || leases > 0 {
		return fmt.Errorf("%s pid %d, frozen for %s, still held %d transaction(s) idle for longer than the dead-man timeout (%s) and %d live lease(s) (TTL %s)",
			p.spec.name, p.pid, freeze, idle, deadMan, leases, leaseTTL), nil
	}
	return nil, nil
}

// terminate ends up to two backends of the workers with
// pg_terminate_backend, preferring those in a transaction (locked-mode
// holders, lease writes in flight).
func (r *round) terminate(f plannedFault) (string, error) {
	r.restart.RLock()
	defer r.restart.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := r.admin.Query(ctx, `SELECT pid, application_name, xact_start IS NOT NULL FROM pg_stat_activity
		WHERE application_name LIKE 'chaos-w%' AND application_name NOT LIKE '%-ledger' ORDER BY pid`)
	if err != nil {
		return "", err
	}
	type backend struct {
		pid  int32
		app  string
		inTx bool
	}
	var all, inTx []backend
	var b backend
	_, err = pgx.ForEachRow(rows, []any{&b.pid, &b.app, &b.inTx}, func() error {
		all = append(all, b)
		if b.inTx {
			inTx = append(inTx, b)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(inTx) > 0 {
		all = inTx
	}
	if len(all) == 0 {
		return "no worker backend to terminate", nil
	}
	victims := []backend{all[int(f.pick*float64(len(all)))]}
	if other := all[int(f.pick2*float64(len(all)))]; other != victims[0] {
		victims = append(victims, other)
	}
	var names []string
	for _, v := range victims {
		if _, err := r.admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, v.pid); err != nil {
			return "", err
		}
		names = append(names, fmt.Sprintf("%s backend %d (in transaction: %v)", v.app, v.pid, v.inTx))
	}
	return strings.Join(names, ", "), nil
}

// clients opens a coverage client of each of grids on one connection of
// its own as the hostile role or the superuser. coverage.New reads the
// series with one plain SELECT, which the hostile role's 150 ms statement
// timeout may cancel on a busy machine; that is the role doing its job, so
// it is tried again.
func (r *round) clients(ctx context.Context, hostile bool, grids ...slot.Series) ([]*coverage.Client, func(), error) {
	url := r.cluster.URL("postgres")
	if hostile {
		url = r.hostileURL()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	closeConn := func() { _ = conn.Close(context.Background()) }
	cs := make([]*coverage.Client, len(grids))
	for i, grid := range grids {
		for attempt := 1; cs[i] == nil; attempt++ {
			cs[i], err = coverage.New(ctx, conn, grid, coverage.Options{Schema: r.schema, ChunkSize: 100})
			var pgErr *pgconn.PgError
			if err != nil && (attempt == 5 || !errors.As(err, &pgErr) || pgErr.Code != "57014") { // query_canceled
				closeConn()
				return nil, nil, err
			}
		}
	}
	return cs, closeConn, nil
}

// reopen re-opens, as the hostile role, 100 to 200 slots of the range's
// completed beginning: late data arrived, the slots must be done again. In
// a many-series round it re-opens the whole range of 8 to 16 series.
func (r *round) reopen(f plannedFault) (string, error) {
	r.restart.RLock()
	defer r.restart.RUnlock()
	if r.sc.engine {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return r.reopenSeries(ctx, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	firstOpen, err := r.firstOpen(ctx)
	if err != nil {
		return "", err
	}
	width := 100 + int(f.pick2*100)
	done := int(firstOpen.Sub(rangeFrom) / time.Minute)
	lo := 0
	if done > width {
		lo = int(f.pick * float64(done-width))
	}
	cs, closeConn, err := r.clients(ctx, true, r.sc.series[0])
	if err != nil {
		return "", err
	}
	defer closeConn()
	res, err := cs[0].Reopen(ctx, minute(lo), minute(lo+width), coverage.WriteOptions{
		States: []string{"COMPLETE"}, Reason: "chaos: late data"})
	if err != nil {
		return "", fmt.Errorf("reopen as %s: %w", hostileRole, err)
	}
	r.reopened.Add(res.Changed)
	return fmt.Sprintf("[%s, %s): %d re-opened, %d held", minute(lo).Format(time.RFC3339), minute(lo+width).Format(time.RFC3339),
		res.Changed, len(res.Held)), nil
}

// firstOpen returns the start of the first slot of the one series not
// done (rangeTo if none): the workers are busy around it.
func (r *round) firstOpen(ctx context.Context) (time.Time, error) {
	var first time.Time
	err := r.admin.QueryRow(ctx, sqlschema.Render(`SELECT coalesce(min(slot_start), $1) FROM {{schema}}.slot
		WHERE name = $2 AND "interval" = $3 AND status NOT IN ('COMPLETE', 'SKIP')`, r.schema), rangeTo, seriesName, interval).Scan(&first)
	return first, err
}

// reopenSeries re-opens, as the hostile role, the COMPLETE slots of 8 to
// 16 consecutive series of a many-series round among those with every slot
// done, one series at a time.
func (r *round) reopenSeries(ctx context.Context, f plannedFault) (string, error) {
	rows, err := r.admin.Query(ctx, sqlschema.Render(`SELECT name FROM {{schema}}.slot GROUP BY name
		HAVING bool_and(status IN ('COMPLETE', 'SKIP')) ORDER BY name`, r.schema))
	if err != nil {
		return "", err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	if len(done) == 0 {
		return "no series done to re-open", nil
	}
	n := min(len(done), 8+int(f.pick2*8))
	first := int(f.pick * float64(len(done)-n))
	grids := make([]slot.Series, n)
	for i, name := range done[first : first+n] {
		grids[i] = r.sc.byName[name]
	}
	cs, closeConn, err := r.clients(ctx, true, grids...)
	if err != nil {
		return "", err
	}
	defer closeConn()
	var changed, held int
	for i, c := range cs {
		res, err := c.Reopen(ctx, r.sc.from, r.sc.to, coverage.WriteOptions{States: []string{"COMPLETE"}, Reason: "chaos: late data"})
		if err != nil {
			return "", fmt.Errorf("reopen %s as %s: %w", grids[i].Name(), hostileRole, err)
		}
		r.reopened.Add(res.Changed)
		changed += int(res.Changed)
		held += len(res.Held)
	}
	return fmt.Sprintf("series %s to %s: %d re-opened, %d held", grids[0].Name(), grids[n-1].Name(), changed, held), nil
}

// materialize inserts the rest of the range with three concurrent
// materializers (one as the hostile role) over overlapping pieces that also
// overlap what the workers materialized.
func (r *round) materialize(f plannedFault) (string, error) {
	r.restart.RLock()
	defer r.restart.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := int(firstPart * float64(slots))
	quarter := (slots - first) / 4
	pieces := [][2]int{
		{first - quarter + int(f.pick*float64(quarter)), first + 2*quarter},
		{first + quarter, first + 3*quarter + int(f.pick2*float64(quarter))},
		{first + 2*quarter, slots},
	}
	inserted := make([]int64, len(pieces))
	errs := make([]error, len(pieces))
	var wg sync.WaitGroup
	for i, p := range pieces {
		wg.Go(func() {
			cs, closeConn, err := r.clients(ctx, i == 1, r.sc.series[0])
			if err != nil {
				errs[i] = err
				return
			}
			defer closeConn()
			res, err := cs[0].Materialize(ctx, minute(p[0]), minute(p[1]), coverage.WriteOptions{})
			inserted[i], errs[i] = res.Inserted, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	var b strings.Builder
	for i, p := range pieces {
		fmt.Fprintf(&b, "[slot %d, %d) inserted %d; ", p[0], p[1], inserted[i])
	}
	return strings.TrimSuffix(b.String(), "; "), nil
}

// restartServer restarts PostgreSQL in mode: fast disconnects everyone,
// immediate crashes and recovers.
func (r *round) restartServer(mode string) (string, error) {
	r.restart.Lock()
	defer r.restart.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	if err := r.cluster.Restart(ctx, mode); err != nil {
		return "", err
	}
	// The suite's own pooled connections died with the server; its next
	// writes must not trip over them.
	r.admin.Reset()
	return fmt.Sprintf("back after %s", time.Since(began).Round(time.Millisecond)), nil
}

// describeFaults lists the faults as they happened.
func (r *round) describeFaults() string {
	var b strings.Builder
	b.WriteString("faults:\n")
	faults := r.faults.all()
	slices.SortFunc(faults, func(a, b fault) int { return a.began.Compare(b.began) })
	for _, f := range faults {
		fmt.Fprintf(&b, "  %s  %-17s %s (%s)", f.began.UTC().Format("15:04:05.000"), f.kind, f.detail, f.end.Sub(f.began).Round(time.Millisecond))
		if f.err != nil {
			fmt.Fprintf(&b, " error: %v", f.err)
		}
		b.WriteString("\n")
	}
	return b.String()
}
