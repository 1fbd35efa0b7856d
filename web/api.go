package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/slot"
)

// maxFailures is how many failed slots the page lists for a range.
const maxFailures = 100

// summary is a series on the page: its grid and its slots by state over
// its whole extent.
type summary struct {
	Name     string `json:"name"`
	Shown    string `json:"shown"` // the name as people should see it
	Interval string `json:"interval"`
	Zone     string `json:"zone"`
	Query    string `json:"query"` // series=…&interval=…, for links
	// Paused says since when the series is paused, by whom and why; empty
	// when it is not.
	Paused string `json:"paused,omitempty"`
	// WaitingUpstream counts the open slots that wait for an upstream
	// series to finish their span; 0 for a series without upstreams.
	WaitingUpstream int64 `json:"waitingUpstream,omitempty"`
	// Href is the page's link to the series' calendar; html/template
	// would escape the fragment's = and & otherwise.
	Href  template.URL `json:"-"`
	Empty bool         `json:"empty"`
	From  string       `json:"from,omitempty"`
	To    string       `json:"to,omitempty"`
	counts
	Covered       float64 `json:"covered"`
	OldestOpen    string  `json:"oldestOpen,omitempty"`
	LastCompleted string  `json:"lastCompleted,omitempty"`
}

// summaries sums each series of infos over its extent: one aggregate
// statement per series, the very calendar of the whole series the page
// asks for next, so that it comes from the cache. asOf is when the oldest
// of them was read.
func (s *server) summaries(ctx context.Context, infos []almanac.SeriesInfo) (sums []summary, asOf time.Time, err error) {
	asOf = time.Now()
	out := make([]summary, 0, len(infos))
	for _, info := range infos {
		g := info.Series
		sm := summary{Name: g.Name(), Shown: input.PrintableName(g.Name()), Interval: g.Interval().String(),
			Zone: g.Location().String(), Query: seriesQuery(g), Paused: pausedText(info)}
		sm.Href = template.URL("#" + sm.Query) // built by url.Values.Encode: nothing to escape
		from, to, ok, err := s.client.Extent(ctx, g)
		if err != nil {
			return nil, asOf, err
		}
		if !ok {
			sm.Empty, sm.Covered = true, 100
			out = append(out, sm)
			continue
		}
		h, at, err := s.heatmap(ctx, g, from, to, s.opts.Buckets, false)
		if err != nil {
			return nil, asOf, err
		}
		asOf = earlier(asOf, at)
		sm.counts = countsOf(h.Total)
		sm.Covered = sm.counts.covered()
		sm.OldestOpen, sm.LastCompleted = human(h.OldestOpen), human(h.LastCompleted)
		if len(info.After) > 0 {
			// Only a series with upstreams pays for the check: one per
			// open slot of its extent.
			st, err := s.client.Status(ctx, g, from, to)
			if err != nil {
				return nil, asOf, err
			}
			sm.WaitingUpstream = st.WaitingUpstream
		}
		out = append(out, sm)
	}
	return out, asOf, nil
}

// usable splits infos into the series that can be shown and the text of
// the stored rows that cannot (SeriesInfo.Err), so that one bad row plain
// SQL wrote is flagged while every other series is shown.
func usable(infos []almanac.SeriesInfo) (good []almanac.SeriesInfo, bad []string) {
	for _, info := range infos {
		if info.Err != nil {
			bad = append(bad, info.Err.Error())
			continue
		}
		good = append(good, info)
	}
	return good, bad
}

// pausedText says since when a series is paused, by whom and why, ""
// when it is not.
func pausedText(info almanac.SeriesInfo) string {
	if info.PausedAt.IsZero() {
		return ""
	}
	out := "paused since " + human(info.PausedAt.In(info.Series.Location())) + " by " + input.PrintableName(info.PausedBy)
	if info.PausedReason != "" {
		out += ": " + info.PausedReason
	}
	return out
}

func seriesQuery(g almanac.Series) string {
	return url.Values{"series": {g.Name()}, "interval": {g.Interval().String()}}.Encode()
}

// human prints an instant for people, in its zone: to the minute, with
// seconds when they are not zero, and the zone's abbreviation, which tells
// the two 02:30 of a night when clocks go back apart. "" for zero.
func human(t time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case t.Second() == 0 && t.Nanosecond() == 0:
		return t.Format("2006-01-02 15:04 MST")
	default:
		return t.Format("2006-01-02 15:04:05 MST")
	}
}

// index renders the page: the series table on the server, the calendar by
// the script from the JSON API.
func (s *server) index(w http.ResponseWriter, r *http.Request) {
	infos, err := s.client.ListSeries(r.Context())
	infos, unusable := usable(infos)
	var sums []summary
	asOf := time.Now()
	if err == nil {
		sums, asOf, err = s.summaries(r.Context(), infos)
	}
	data := map[string]any{"Series": sums, "Actions": s.actionsOn(), "Buckets": s.opts.Buckets, "CSRF": "",
		"Refresh": max(s.opts.Refresh, 0).Milliseconds(), "AsOf": asOf.Format("15:04:05 MST"), "Unusable": unusable}
	if v, err := s.client.ServerVersion(r.Context()); err == nil {
		data["Server"] = v
	}
	if err != nil {
		code, msg := s.status(r, err)
		w.WriteHeader(code)
		data["Problem"] = msg
	}
	if name, ok := s.proxyUser(r); ok && s.actionsOn() {
		if input.CheckActor(name) == nil {
			data["CSRF"], data["Actor"], data["Proxied"] = s.proxyCSRF(name), name, true
		}
	} else if _, sess, ok := s.sessions.get(r, time.Now()); ok && s.actionsOn() {
		data["CSRF"], data["Actor"] = sess.csrf, sess.actor
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "index.html", data); err != nil {
		s.opts.Logger.Error("almanac web: render", "error", err)
	}
}

// apiSeries answers the series table: every series, or the one named by
// series and interval (what a page showing that series refreshes, at the
// cost of one series rather than all).
func (s *server) apiSeries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var infos []almanac.SeriesInfo
	var err error
	if q.Has("series") || q.Has("interval") {
		var info almanac.SeriesInfo
		if info, err = s.client.LookupSeries(r.Context(), q.Get("series"), q.Get("interval")); err == nil {
			infos = []almanac.SeriesInfo{info}
		}
	} else {
		infos, err = s.client.ListSeries(r.Context())
	}
	infos, unusable := usable(infos)
	var sums []summary
	var asOf time.Time
	if err == nil {
		sums, asOf, err = s.summaries(r.Context(), infos)
	}
	var version string
	if err == nil {
		version, err = s.client.ServerVersion(r.Context())
	}
	if err != nil {
		code, msg := s.status(r, err)
		writeError(w, code, msg)
		return
	}
	body := map[string]any{"series": sums, "serverVersion": version}
	if len(unusable) > 0 {
		body["unusable"] = unusable
	}
	writeFresh(w, r, body, asOf)
}

// target is the series and range a request names.
type target struct {
	series   almanac.Series
	from, to time.Time
	// extent is the series' stored range (from = to when it has no slots).
	lo, hi time.Time
	// upstream: the series depends on upstream series.
	upstream bool
}

// target reads series, interval, from and to (default: the series'
// extent) of r's query or form.
func (s *server) target(r *http.Request, get func(string) string) (target, error) {
	name, iv := get("series"), get("interval")
	if name == "" || iv == "" {
		return target{}, fmt.Errorf("%w: series and interval are required, e.g. ?series=orders&interval=PT1H", almanac.ErrInvalid)
	}
	info, err := s.client.LookupSeries(r.Context(), name, iv)
	if err != nil {
		return target{}, err
	}
	t := target{series: info.Series, upstream: len(info.After) > 0}
	lo, hi, ok, err := s.client.Extent(r.Context(), t.series)
	if err != nil {
		return target{}, err
	}
	if !ok {
		lo, hi = time.Now().In(t.series.Location()), time.Now().In(t.series.Location())
	}
	t.lo, t.hi, t.from, t.to = lo, hi, lo, hi
	for _, p := range []struct {
		key string
		at  *time.Time
	}{{"from", &t.from}, {"to", &t.to}} {
		if text := get(p.key); text != "" {
			if *p.at, err = slot.ParseTime(text, t.series.Location()); err != nil {
				return target{}, fmt.Errorf("%s: %w", p.key, err)
			}
		}
	}
	if t.to.Before(t.from) {
		return target{}, fmt.Errorf("%w: from %s is after to %s", almanac.ErrInvalid, get("from"), get("to"))
	}
	return t, nil
}

// heatmap is the calendar's JSON.
type heatmap struct {
	Series        string  `json:"series"`
	Shown         string  `json:"shown"`
	Interval      string  `json:"interval"`
	Zone          string  `json:"zone"`
	From          string  `json:"from"`
	To            string  `json:"to"`
	FromText      string  `json:"fromText"`
	ToText        string  `json:"toText"`
	Unit          string  `json:"unit"`
	Step          int     `json:"step"`
	Rows          []row   `json:"rows"`
	Total         counts  `json:"total"`
	Covered       float64 `json:"covered"`
	OldestOpen    string  `json:"oldestOpen,omitempty"`
	LastCompleted string  `json:"lastCompleted,omitempty"`
	// Up is the range one zoom level out, absent at the whole series.
	Up *span `json:"up,omitempty"`
	// Whole is the series' extent.
	Whole span `json:"whole"`
}

// heatmap returns the calendar of [from, to) of g, from the cache when it
// is fresh, and when it was read. A bounded computation waits for one of
// the MaxHeatmaps turns: the calendar requests name any range, each a new
// computation; the series table's calendars are one per series, shared
// through the cache.
func (s *server) heatmap(ctx context.Context, g almanac.Series, from, to time.Time, buckets int, bounded bool) (almanac.Heatmap, time.Time, error) {
	key := fmt.Sprintf("%q %s %d %d %d", g.Name(), g.Interval(), from.UnixMicro(), to.UnixMicro(), buckets)
	return s.cache.get(ctx, key, func() (almanac.Heatmap, error) {
		if bounded {
			release, err := s.turn(ctx)
			if err != nil {
				return almanac.Heatmap{}, err
			}
			defer release()
		}
		return s.client.Heatmap(ctx, g, from, to, buckets)
	})
}

// errBusy answers a calendar that waited too long for its turn.
var errBusy = errors.New("the server is busy computing other calendars; try again shortly")

// turn waits for one of the MaxHeatmaps turns to compute a calendar, at
// most heatmapWait, and returns its release.
func (s *server) turn(ctx context.Context) (release func(), err error) {
	wait := time.NewTimer(heatmapWait)
	defer wait.Stop()
	select {
	case s.heavy <- struct{}{}:
		return func() { <-s.heavy }, nil
	case <-wait.C:
		return nil, errBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type span struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func (s *server) apiHeatmap(w http.ResponseWriter, r *http.Request) {
	t, err := s.target(r, r.URL.Query().Get)
	if err == nil {
		var h almanac.Heatmap
		var at time.Time
		if h, at, err = s.heatmap(r.Context(), t.series, t.from, t.to, s.buckets(r), true); err == nil {
			out := heatmap{Series: t.series.Name(), Shown: input.PrintableName(t.series.Name()),
				Interval: t.series.Interval().String(), Zone: t.series.Location().String(),
				From: slot.FormatTime(h.From), To: slot.FormatTime(h.To), FromText: human(h.From), ToText: human(h.To), Unit: h.Unit, Step: h.Step,
				Rows: layout(h, t.series.Interval()), Total: countsOf(h.Total),
				OldestOpen: human(h.OldestOpen), LastCompleted: human(h.LastCompleted),
				Whole: span{slot.FormatTime(t.lo), slot.FormatTime(t.hi)}}
			out.Covered = out.Total.covered()
			if a, b, ok := enclosing(h.From, h.To, t.lo, t.hi); ok {
				out.Up = &span{slot.FormatTime(a), slot.FormatTime(b)}
			}
			// The counts may come from the cache: as of when they were read.
			writeFresh(w, r, out, at.In(t.series.Location()))
			return
		}
	}
	code, msg := s.status(r, err)
	writeError(w, code, msg)
}

// buckets is the cell budget of a request: ?buckets=N, at most the
// handler's.
func (s *server) buckets(r *http.Request) int {
	if n, err := strconv.Atoi(r.URL.Query().Get("buckets")); err == nil && n >= 1 && n <= s.opts.Buckets {
		return n
	}
	return s.opts.Buckets
}

// overdueAfter is how long past its next try a failed slot waits before the
// page calls it overdue: a running worker looks for due slots every few
// seconds (almanac.Options.PollInterval, 5 s by default), and the page's
// clock may be a little off the database's.
const overdueAfter = time.Minute

// failure is a failed slot as the page lists it.
type failure struct {
	Slot      string `json:"slot"`
	SlotText  string `json:"slotText"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	FailCount int    `json:"failCount"`
	Message   string `json:"message"`
	At        string `json:"at"`
	NotBefore string `json:"notBefore,omitempty"`
	// Overdue is set when the slot's next try is more than overdueAfter
	// past and no worker has taken it.
	Overdue bool `json:"overdue,omitempty"`
}

// failures are the failed slots of a range as the page lists them, and
// whether workers seem to have stopped.
type failures struct {
	Failures []failure `json:"failures"`
	Limit    int       `json:"limit"`
	// Overdue counts the listed slots that are overdue.
	Overdue int `json:"overdue"`
	// Stalled is set when some are overdue and no worker has been seen
	// after the latest of them fell due: the series' last completion and
	// the latest failure listed are no later.
	Stalled bool `json:"stalled"`
	// LastSeen is the later of those two, "" when there is neither; set
	// when some are overdue.
	LastSeen string `json:"lastSeen,omitempty"`
	// WaitingUpstream counts the range's open slots that wait for an
	// upstream series, WaitingOn what the first of them wait on (see
	// almanac.Status); both empty for a series without upstreams.
	WaitingUpstream int64       `json:"waitingUpstream,omitempty"`
	WaitingOn       []waitingOn `json:"waitingOn,omitempty"`
}

// waitingOn is an upstream slot, or a part of an upstream's range without
// a row (state "missing"), that a slot of the shown series waits for.
type waitingOn struct {
	Slot     string `json:"slot"` // the waiting slot's start, for its history
	SlotText string `json:"slotText"`
	Series   string `json:"series"`
	Shown    string `json:"shown"`
	Interval string `json:"interval"`
	Query    string `json:"query"` // the upstream series, for links
	From     string `json:"from"`
	To       string `json:"to"`
	Text     string `json:"text"` // [From, To) for people
	State    string `json:"state"`
	Message  string `json:"message,omitempty"`
}

// waitingFor fills out's WaitingUpstream and WaitingOn for the range of t,
// whose series has upstreams.
func (s *server) waitingFor(ctx context.Context, t target, out *failures) error {
	st, err := s.client.Status(ctx, t.series, t.from, t.to)
	if err != nil {
		return err
	}
	out.WaitingUpstream = st.WaitingUpstream
	for _, n := range st.WaitingOn {
		state := strings.ToLower(n.Status)
		switch {
		case n.Parked:
			state = "parked"
		case n.Status == "ACQUIRED":
			state = "in-flight"
		case n.Status == "AVAILABLE":
			state = "open"
		}
		up := url.Values{"series": {n.Name}, "interval": {n.Interval}}.Encode()
		out.WaitingOn = append(out.WaitingOn, waitingOn{Slot: slot.FormatTime(n.Waiting), SlotText: human(n.Waiting),
			Series: n.Name, Shown: input.PrintableName(n.Name), Interval: n.Interval, Query: up, From: slot.FormatTime(n.Start),
			To: slot.FormatTime(n.End), Text: human(n.Start) + " – " + human(n.End), State: state, Message: n.Message})
	}
	return nil
}

func (s *server) apiFailures(w http.ResponseWriter, r *http.Request) {
	t, err := s.target(r, r.URL.Query().Get)
	var fs []almanac.Failure
	if err == nil {
		fs, _, err = s.client.Failures(r.Context(), almanac.FailuresOptions{Name: t.series.Name(), Interval: t.series.Interval().String(),
			From: t.from, To: t.to, Limit: maxFailures, Latest: true})
	}
	var now time.Time
	var out failures
	if err == nil {
		now = time.Now().In(t.series.Location())
		out, err = s.failures(r.Context(), t, fs, now)
	}
	if err == nil && t.upstream {
		err = s.waitingFor(r.Context(), t, &out)
	}
	if err != nil {
		code, msg := s.status(r, err)
		writeError(w, code, msg)
		return
	}
	writeFresh(w, r, out, now)
}

// failures lists fs, the failed slots of t, as of now: which are overdue,
// and whether a worker has been seen since they fell due. A worker leaves
// two traces the page can read cheaply: the series' last completion (its
// whole-series calendar, which the series table keeps in the cache) and
// the failures themselves (fs is latest first). Claims and leases write
// no time that can be read without reading every row.
func (s *server) failures(ctx context.Context, t target, fs []almanac.Failure, now time.Time) (failures, error) {
	out := failures{Failures: make([]failure, len(fs)), Limit: maxFailures}
	var lastDue, lastSeen time.Time
	for i, f := range fs {
		state := "failed"
		if f.Parked {
			state = "parked"
		}
		// A slot due at once (no backoff, or retried) is due since its
		// failure or retry was recorded.
		due := f.NotBefore
		if due.IsZero() {
			due = f.At
		}
		overdue := !f.Parked && now.Sub(due) > overdueAfter
		if overdue {
			out.Overdue++
			lastDue = later(lastDue, due)
		}
		lastSeen = later(lastSeen, f.At)
		out.Failures[i] = failure{Slot: slot.FormatTime(f.Start), SlotText: human(f.Start), State: state,
			Attempts: f.Attempts, FailCount: f.FailCount, Message: f.Message, At: human(f.At),
			NotBefore: human(f.NotBefore), Overdue: overdue}
	}
	if out.Overdue == 0 {
		return out, nil
	}
	h, _, err := s.heatmap(ctx, t.series, t.lo, t.hi, s.opts.Buckets, false)
	if err != nil {
		return failures{}, err
	}
	lastSeen = later(lastSeen, h.LastCompleted)
	// A slot failed without backoff is due the moment its failure is
	// recorded: that failure is no sign of a worker after it.
	out.Stalled, out.LastSeen = !lastSeen.After(lastDue), human(lastSeen)
	return out, nil
}

// event is one entry of a slot's history as the page shows it.
type event struct {
	At         string `json:"at"`
	Event      string `json:"event"`
	Generation int64  `json:"generation"`
	Owner      string `json:"owner,omitempty"`
	Fence      int64  `json:"fence,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	Actor      string `json:"actor,omitempty"`
	Message    string `json:"message,omitempty"`
}

func (s *server) apiHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t, err := s.target(r, q.Get)
	if err == nil && q.Get("slot") == "" {
		err = fmt.Errorf("%w: slot is required, e.g. ?slot=2026-03-01T05:00:00Z", almanac.ErrInvalid)
	}
	var at time.Time
	if err == nil {
		at, err = slot.ParseTime(q.Get("slot"), t.series.Location())
	}
	var h almanac.History
	if err == nil {
		h, err = s.client.History(r.Context(), t.series, at)
	}
	if err != nil {
		code, msg := s.status(r, err)
		writeError(w, code, msg)
		return
	}
	out := map[string]any{"slot": human(h.Slot.Start), "end": human(h.Slot.End)}
	if c := h.Current; c != nil {
		state := map[string]string{almanac.StatusComplete: "complete", almanac.StatusSkip: "skipped", almanac.StatusAcquired: "in-flight"}[c.Status]
		switch {
		case state != "":
		case c.Parked:
			state = "parked"
		case c.FailCount > 0:
			state = "failed"
		default:
			state = "open"
		}
		out["current"] = map[string]any{"state": state, "status": c.Status, "generation": c.Generation,
			"attempts": c.Attempts, "failCount": c.FailCount, "fence": c.Fence, "owner": c.Owner,
			"leaseUntil": human(c.LeaseUntil), "notBefore": human(c.NotBefore),
			"message": c.Message, "created": human(c.CreatedAt), "updated": human(c.UpdatedAt),
			"completed": human(c.CompletedAt)}
	} else if c := h.Compacted; c != nil {
		// Finished, its row deleted by a compaction: what the run keeps.
		state := map[string]string{almanac.StatusComplete: "complete", almanac.StatusSkip: "skipped"}[c.Status]
		out["compacted"] = map[string]any{"state": state, "status": c.Status, "generation": c.Generation,
			"completed": human(c.CompletedAt)}
	}
	events := make([]event, len(h.Events))
	for i, e := range h.Events {
		events[i] = event{At: human(e.At), Event: e.Event, Generation: e.Generation, Owner: e.Owner,
			Fence: e.Fence, Attempt: e.Attempt, Actor: e.Actor, Message: e.Message}
	}
	out["events"] = events
	writeFresh(w, r, out, time.Now().In(t.series.Location()))
}

// apiAction re-opens, skips or retries a range, for an authorized request
// that gives a reason.
func (s *server) apiAction(w http.ResponseWriter, r *http.Request) {
	actor, ok := s.authorize(w, r)
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "malformed form")
		return
	}
	action, reason := r.PostForm.Get("action"), r.PostForm.Get("reason")
	t, err := s.target(r, r.PostForm.Get)
	if err == nil && (r.PostForm.Get("from") == "" || r.PostForm.Get("to") == "") {
		err = fmt.Errorf("%w: from and to are required for an action", almanac.ErrInvalid)
	}
	if err == nil && reason == "" {
		err = fmt.Errorf("%w: a reason is required (it is kept in the slots' history)", almanac.ErrInvalid)
	}
	if err == nil {
		err = input.CheckReason(reason)
	}
	// The history records who acts: a person, or for the shared token
	// the client's own actor.
	client := s.client
	if err == nil && actor != "" {
		client, err = s.client.WithActor(actor)
	}
	var result string
	if err == nil {
		ctx := r.Context()
		switch action {
		case "reopen":
			var res almanac.WriteResult
			res, err = client.Reopen(ctx, t.series, t.from, t.to, almanac.WriteOptions{Reason: reason})
			result = fmt.Sprintf("re-opened %d slots%s", res.Changed, held(len(res.Held)))
		case "skip":
			var res almanac.WriteResult
			res, err = client.Skip(ctx, t.series, t.from, t.to, almanac.WriteOptions{Reason: reason})
			result = fmt.Sprintf("skipped %d slots (%d missing ones created as skipped)%s", res.Changed, res.Inserted, held(len(res.Held)))
		case "retry":
			// Retry records its own message in the history and takes no
			// reason; the reason goes to the log with the rest of the
			// action.
			var res almanac.WriteResult
			res, err = client.Retry(ctx, t.series, t.from, t.to, almanac.WriteOptions{})
			result = fmt.Sprintf("retrying %d slots now (%d were parked)%s", res.Changed, res.Unparked, held(len(res.Held)))
		default:
			err = fmt.Errorf("%w: action %q; expected reopen, skip or retry", almanac.ErrInvalid, action)
		}
	}
	if err != nil {
		code, msg := s.status(r, err)
		writeError(w, code, msg)
		return
	}
	s.cache.clear()
	s.opts.Logger.Info("almanac web: action", "action", action, "series", t.series.String(),
		"from", slot.FormatTime(t.from), "to", slot.FormatTime(t.to), "reason", reason,
		"actor", actorText(actor), "remote", r.RemoteAddr, "result", result)
	writeJSON(w, map[string]any{"result": result})
}

func held(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d held by workers were left alone", n)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	// An error here is a client that went away: nothing to tell it.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
