package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/coverage"
)

const (
	// wakeSlots is how many slots the wake-up series has; re-opens cycle
	// through them.
	wakeSlots = 10
	// wakeTimeout bounds one wake-up: far above the scheduler's poll
	// interval, which picks up a slot whose notification was lost.
	wakeTimeout = 30 * time.Second
	// idleAfter is how long after recording an outcome the worker is left
	// alone before the next re-open, so that it has looked for more work,
	// found none and gone idle: the bar is about an idle worker.
	idleAfter = 50 * time.Millisecond
	// warmups bounds the re-opens done before measuring.
	warmups = 5
)

// errWakeTimeout is returned when a re-opened slot is not started in time.
var errWakeTimeout = errors.New("re-opened slot not started within " + wakeTimeout.String())

// runWake: the time from a re-open until an idle scheduler's worker starts
// the slot, woken by LISTEN/NOTIFY with the default 5 s poll interval,
// against a bare NOTIFY reaching a LISTEN connection.
func runWake(ctx context.Context, e *env) ([]Row, error) {
	s, grid, err := e.newBenchSeries(ctx, "wake")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := s.fresh(ctx, grid, wakeSlots, "COMPLETE"); err != nil {
		return nil, err
	}
	cov, err := coverage.New(ctx, e.admin, grid, coverage.Options{Schema: s.name})
	if err != nil {
		return nil, err
	}
	pool, err := e.workerPool(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	type start struct {
		slot time.Time
		at   time.Time
	}
	started := make(chan start, wakeSlots)
	finished := make(chan struct{}, wakeSlots)
	// The client says in its log (at debug) when an outcome is recorded.
	client, err := almanac.New(pool, almanac.Options{Schema: s.name, Concurrency: 1,
		Logger: slog.New(completions{finished})})
	if err != nil {
		return nil, err
	}
	err = client.Register(almanac.Job{Series: grid, From: at(0), To: at(wakeSlots),
		Handler: func(ctx context.Context, _ pgx.Tx, sl almanac.Slot) error {
			select {
			case started <- start{sl.Start, time.Now()}:
			case <-ctx.Done():
			}
			return nil
		}})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()

	// reopen re-opens slot k once the worker is idle and returns how long
	// until the worker started it, once it has recorded the outcome.
	reopen := func(ctx context.Context, k int) (time.Duration, error) {
		time.Sleep(idleAfter)
		t0 := time.Now()
		res, err := cov.Reopen(ctx, at(k), at(k+1), coverage.WriteOptions{Reason: "bench"})
		if err != nil {
			return 0, err
		}
		if res.Changed != 1 {
			return 0, fmt.Errorf("re-opened %d slots, expected 1", res.Changed)
		}
		timeout := time.After(wakeTimeout)
		var latency time.Duration
		for latency == 0 {
			select {
			case st := <-started:
				if st.slot.Equal(at(k)) {
					latency = max(st.at.Sub(t0), time.Nanosecond)
				}
			case <-timeout:
				return 0, errWakeTimeout
			}
		}
		select {
		case <-finished:
			return latency, nil
		case <-timeout:
			return 0, errWakeTimeout
		}
	}
	// Warm up until a re-open is picked up well within the poll interval:
	// the scheduler is then listening. (A first re-open may arrive before
	// its LISTEN and wait for the poll.)
	for i := 0; ; i++ {
		d, err := reopen(ctx, 0)
		if err != nil {
			return nil, err
		}
		if d < time.Second || i == warmups {
			break
		}
	}

	probe, err := e.newNotifyProbe(ctx)
	if err != nil {
		return nil, err
	}
	defer probe.close()
	var p99 [2][]float64
	next := 1
	sides, err := e.interleave(ctx,
		func(ctx context.Context) (float64, error) {
			latencies := make([]float64, e.size.wakes)
			for i := range latencies {
				d, err := reopen(ctx, next%wakeSlots)
				if err != nil {
					return 0, err
				}
				next++
				latencies[i] = ms(d)
			}
			p99[0] = append(p99[0], percentile(latencies, 99))
			return median(latencies), nil
		},
		func(ctx context.Context) (float64, error) {
			latencies := make([]float64, e.size.wakes)
			for i := range latencies {
				d, err := probe.roundTrip(ctx)
				if err != nil {
					return 0, err
				}
				latencies[i] = ms(d)
			}
			p99[1] = append(p99[1], percentile(latencies, 99))
			return median(latencies), nil
		})
	if err != nil {
		return nil, err
	}
	wakeFigure := Figure{Label: "almanac", Unit: Milliseconds}
	notifyFigure := Figure{Label: "bare NOTIFY", Unit: Milliseconds}
	return []Row{
		newRow("wake-median", fmt.Sprintf("wake-up, re-open to handler start, median of %d", e.size.wakes),
			wakeFigure, notifyFigure, sides[0], sides[1], &Bar{OnEngine: true, Value: 100}),
		newRow("wake-p99", fmt.Sprintf("wake-up, re-open to handler start, p99 of %d", e.size.wakes),
			wakeFigure, notifyFigure, p99[0], p99[1], nil),
	}, nil
}

// completions is a log handler that signals every outcome a client records
// ("almanac: slot completed", at debug).
type completions struct{ done chan<- struct{} }

func (completions) Enabled(context.Context, slog.Level) bool { return true }

func (c completions) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "almanac: slot completed" {
		select {
		case c.done <- struct{}{}:
		default:
		}
	}
	return nil
}

func (c completions) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c completions) WithGroup(string) slog.Handler      { return c }

// notifyProbe times a bare NOTIFY, committed on its own, until a LISTEN
// connection receives it: the floor of any wake-up through PostgreSQL.
type notifyProbe struct {
	e        *env
	conn     *pgx.Conn
	channel  string
	received chan time.Time
	cancel   context.CancelFunc
	done     chan struct{}
}

func (e *env) newNotifyProbe(ctx context.Context) (*notifyProbe, error) {
	// From the connection string alone: the pool's configuration may cancel
	// queries with a cancel request and a grace period, which an idle
	// LISTEN connection would sit out when the probe closes.
	cfg, err := pgx.ParseConfig(e.admin.Config().ConnString())
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails
	p := &notifyProbe{e: e, conn: conn, channel: "almanac_bench_" + hex.EncodeToString(b),
		received: make(chan time.Time, 1), done: make(chan struct{})}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{p.channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("listen: %w", err)
	}
	listenCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	go func() {
		defer close(p.done)
		for {
			if _, err := conn.WaitForNotification(listenCtx); err != nil {
				return
			}
			select {
			case p.received <- time.Now():
			default:
			}
		}
	}()
	return p, nil
}

func (p *notifyProbe) roundTrip(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	if _, err := p.e.admin.Exec(ctx, "SELECT pg_notify($1, 'bench')", p.channel); err != nil {
		return 0, err
	}
	select {
	case at := <-p.received:
		return at.Sub(t0), nil
	case <-time.After(wakeTimeout):
		return 0, errors.New("notification not received within " + wakeTimeout.String())
	}
}

func (p *notifyProbe) close() {
	p.cancel()
	<-p.done
	_ = p.conn.Close(context.Background())
}
