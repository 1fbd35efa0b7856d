package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/telemetry"
	"github.com/almanacdev/almanac/slot"
)

// One `almanac run` serves a set of series of one interval: the names given
// (NAME..., --series), or the registered series whose name matches --like,
// or all of them (--all). A pattern is matched again every --refresh and on
// SIGHUP, so that series added later are served and series removed from
// the table stop being served, without a restart.
//
// The client API takes jobs only while a client is stopped, so a new set is
// served by a new client, started at once, while the previous one stops
// acquiring and lets its running commands finish (each within --timeout):
// a change of the set interrupts nothing. The two overlap only while those
// commands finish; a permit per --workers keeps the commands running at
// once within --workers across both (a slot claimed meanwhile waits for a
// permit, its lease renewed).

// likeMatcher compiles a SQL LIKE pattern (% any run of characters, _ one
// character, \ escapes the next one; case-sensitive, as in PostgreSQL)
// into a regular expression matching the whole name. A pattern that ends
// with the escape character is refused, as PostgreSQL refuses it.
func likeMatcher(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	runes := []rune(pattern)
	for i := 0; i < len(runes); i++ {
		switch r := runes[i]; r {
		case '%':
			b.WriteString(`.*`)
		case '_':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(runes) {
				return nil, usagef("--like %q: ends with the escape character \\; expected e.g. 'tenant\\_%%'", pattern)
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(runes[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}

// sidecar serves the jobs of a set of series, one client at a time (see
// above).
type sidecar struct {
	a     *app
	base  *almanac.Client // registers nothing; lists series, readiness, the gauges
	opts  almanac.Options // of the clients that run the jobs
	clock *stopClock
	job   func(almanac.Series) (almanac.Job, error)
	grace time.Duration
	log   *slog.Logger
	// like selects the registered series of interval iv whose name
	// matches; nil serves the series given at the start only.
	like *regexp.Regexp
	iv   slot.Interval
	// describe names the selection in messages (--like 'tenant_%').
	describe string

	mu       sync.Mutex
	cur      *almanac.Client
	serving  map[string]almanac.Series // by name
	stopping sync.WaitGroup            // clients stopped, their commands finishing
}

// match returns the registered series of the interval whose names match
// the pattern.
func (s *sidecar) match(ctx context.Context) (map[string]almanac.Series, error) {
	infos, err := s.base.ListSeries(ctx)
	if err != nil {
		return nil, err
	}
	set := map[string]almanac.Series{}
	for _, info := range infos {
		g := info.Series
		if g.Interval() == s.iv && s.like.MatchString(g.Name()) {
			set[g.Name()] = g
		}
	}
	return set, nil
}

// served returns how many series are served.
func (s *sidecar) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.serving)
}

// apply serves set: unless it is the set served already, a new client is
// started with a job per series of set, then the previous one is stopped
// (its running commands finish). If the new client cannot start, the
// previous one goes on and the error is returned.
func (s *sidecar) apply(ctx context.Context, set map[string]almanac.Series) error {
	// Only serve's goroutine writes cur and serving; the lock is for
	// their readers.
	if s.serving != nil && maps.EqualFunc(set, s.serving, sameGrid) {
		return nil
	}
	var next *almanac.Client
	if len(set) > 0 {
		c, err := almanac.New(s.a.pool, s.opts)
		if err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(set)) {
			j, err := s.job(set[name])
			if err != nil {
				return err
			}
			if err := c.Register(j); err != nil {
				return err
			}
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		next = c
	}
	var added, removed []string
	for name := range set {
		if _, ok := s.serving[name]; !ok {
			added = append(added, name)
		}
	}
	for name := range s.serving {
		if _, ok := set[name]; !ok {
			removed = append(removed, name)
		}
	}
	s.mu.Lock()
	if s.cur != nil {
		s.retire(s.cur)
	}
	s.cur, s.serving = next, set
	s.mu.Unlock()
	if len(set) == 0 {
		s.log.Warn("almanac: no series to serve; waiting for one to match", "selection", s.describe, "interval", s.iv.String())
	}
	s.log.Info("almanac: serving series", "selection", s.describe, "interval", s.iv.String(), "series_count", len(set),
		"added", shortList(added), "removed", shortList(removed))
	return nil
}

// sameGrid reports whether a and b place their slots alike: a series
// removed and registered again with another zone or origin is served anew.
func sameGrid(a, b almanac.Series) bool {
	return a.Location().String() == b.Location().String() && a.Origin().Equal(b.Origin())
}

// retire stops c in the background: it acquires no more, and its running
// commands finish (or, once the sidecar is stopping, get --grace).
func (s *sidecar) retire(c *almanac.Client) {
	s.stopping.Add(1)
	go func() {
		defer s.stopping.Done()
		if err := c.Stop(context.Background()); err != nil {
			s.log.Error("almanac: stopping workers failed", "error", err)
		}
	}()
}

// shortList is names sorted, at most 20 of them and how many more.
func shortList(names []string) string {
	slices.Sort(names)
	if len(names) > 20 {
		return strings.Join(names[:20], ", ") + fmt.Sprintf(" and %d more", len(names)-20)
	}
	return strings.Join(names, ", ")
}

// serve serves set until ctx is done, following the pattern every refresh
// and on SIGHUP, then stops: running commands get --grace to finish, then
// they are stopped and their slots released for another process.
func (s *sidecar) serve(ctx context.Context, set map[string]almanac.Series, refresh time.Duration) error {
	// SIGHUP is caught before anything is served: its default would end
	// the process.
	hup := make(chan os.Signal, 1)
	if s.like != nil {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	if err := s.apply(ctx, set); err != nil {
		return err
	}
	if s.like != nil {
		tick := time.NewTicker(refresh)
		defer tick.Stop()
	follow:
		for {
			select {
			case <-ctx.Done():
				break follow
			case <-tick.C:
			case <-hup:
				s.log.Info("almanac: SIGHUP: reading the series again", "selection", s.describe)
			}
			set, err := s.match(ctx)
			if err == nil {
				err = s.apply(ctx, set)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Error("almanac: following the series failed; serving the previous set", "selection", s.describe, "error", err)
			}
		}
	}
	<-ctx.Done()
	return s.stop()
}

// stop stops the client serving now and waits for every stopped client:
// running commands get --grace to finish, then they are stopped.
func (s *sidecar) stop() error {
	s.mu.Lock()
	if s.cur != nil {
		s.retire(s.cur)
		s.cur = nil
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.stopping.Wait()
		close(done)
	}()
	grace := time.NewTimer(s.grace)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	}
	// The clients' shutdown waits end now: running commands get SIGTERM,
	// then SIGKILL --grace later, and their slots are released. (The
	// engine's own line that follows gives the clients' long timeout.)
	s.log.Warn("almanac: running commands did not finish within --grace; stopping them", "grace", s.grace)
	s.clock.hurry()
	<-done
	return nil
}

// readyMux answers /readyz with 503 while no series is served, then as
// inner does; inner serves everything else.
func (s *sidecar) readyMux(inner http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", inner)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.served() == 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: no series to serve (%s, interval %s)\n", s.describe, s.iv)
			return
		}
		inner.ServeHTTP(w, r)
	})
	return mux
}

// stopClock is the clock of the clients that run the jobs: the system
// clock, whose waits all end at once when hurry is called. Their shutdown
// timeout is long, so that a client replaced by a new set lets its
// commands finish; when the sidecar stops, hurry ends that wait after
// --grace, as the shutdown timeout of a single client would.
type stopClock struct {
	mu      sync.Mutex
	hurried bool
	waits   map[*clockWait]struct{}
}

type clockWait struct {
	ch    chan time.Time
	timer *time.Timer
}

func newStopClock() *stopClock { return &stopClock{waits: map[*clockWait]struct{}{}} }

func (c *stopClock) Now() time.Time { return time.Now() }

func (c *stopClock) After(d time.Duration) <-chan time.Time {
	w := &clockWait{ch: make(chan time.Time, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hurried {
		w.ch <- time.Now()
		return w.ch
	}
	c.waits[w] = struct{}{}
	w.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		_, pending := c.waits[w]
		delete(c.waits, w)
		c.mu.Unlock()
		if pending {
			w.ch <- time.Now()
		}
	})
	return w.ch
}

// hurry ends every wait now, and every later one at once.
func (c *stopClock) hurry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hurried = true
	for w := range c.waits {
		w.timer.Stop()
		w.ch <- time.Now()
		delete(c.waits, w)
	}
}

// workerMeters is the meter provider of the clients that run the jobs.
// The gauges of open slots cover the whole schema and are registered by
// the base client, once; a client registers them for its lifetime, so
// each new set would add a statement to every scrape. Everything else
// (counters, histograms, busy workers) passes through.
type workerMeters struct{ metric.MeterProvider }

func (p workerMeters) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return workerMeter{p.MeterProvider.Meter(name, opts...)}
}

type workerMeter struct{ metric.Meter }

func (m workerMeter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	if name == telemetry.SlotsOpen {
		return noop.Int64ObservableGauge{}, nil
	}
	return m.Meter.Int64ObservableGauge(name, opts...)
}

func (m workerMeter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	if name == telemetry.OldestOpenAge {
		return noop.Float64ObservableGauge{}, nil
	}
	return m.Meter.Float64ObservableGauge(name, opts...)
}

func (m workerMeter) RegisterCallback(f metric.Callback, instruments ...metric.Observable) (metric.Registration, error) {
	ours := slices.DeleteFunc(slices.Clone(instruments), func(o metric.Observable) bool {
		switch o.(type) {
		case noop.Int64ObservableGauge, noop.Float64ObservableGauge:
			return true
		}
		return false
	})
	if len(ours) == 0 {
		return noop.Registration{}, nil
	}
	return m.Meter.RegisterCallback(f, ours...)
}
