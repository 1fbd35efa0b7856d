package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/almanacdev/almanac"
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

// summaries sums every series over its extent: one aggregate statement per
// series, the very calendar of the whole series the page asks for next,
// so that it comes from the cache.
func (s *server) summaries(r *http.Request) ([]summary, error) {
	ctx := r.Context()
	infos, err := s.client.ListSeries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]summary, 0, len(infos))
	for _, info := range infos {
		g := info.Series
		sm := summary{Name: g.Name(), Shown: almanac.PrintableName(g.Name()), Interval: g.Interval().String(),
			Zone: g.Location().String(), Query: seriesQuery(g)}
		sm.Href = template.URL("#" + sm.Query) // built by url.Values.Encode: nothing to escape
		from, to, ok, err := s.client.Extent(ctx, g)
		if err != nil {
			return nil, err
		}
		if !ok {
			sm.Empty, sm.Covered = true, 100
			out = append(out, sm)
			continue
		}
		h, _, err := s.heatmap(ctx, g, from, to, s.opts.Buckets)
		if err != nil {
			return nil, err
		}
		sm.counts = countsOf(h.Total)
		sm.Covered = sm.counts.covered()
		sm.OldestOpen, sm.LastCompleted = human(h.OldestOpen), human(h.LastCompleted)
		out = append(out, sm)
	}
	return out, nil
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
	sums, err := s.summaries(r)
	data := map[string]any{"Series": sums, "Actions": s.actionsOn(), "Buckets": s.opts.Buckets, "CSRF": ""}
	if v, err := s.client.ServerVersion(r.Context()); err == nil {
		data["Server"] = v
	}
	if err != nil {
		code, msg := s.status(r, err)
		w.WriteHeader(code)
		data["Problem"] = msg
	}
	if _, sess, ok := s.sessions.get(r, time.Now()); ok && s.actionsOn() {
		data["CSRF"] = sess.csrf
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "index.html", data); err != nil {
		s.opts.Logger.Error("almanac web: render", "error", err)
	}
}

func (s *server) apiSeries(w http.ResponseWriter, r *http.Request) {
	sums, err := s.summaries(r)
	var version string
	if err == nil {
		version, err = s.client.ServerVersion(r.Context())
	}
	if err != nil {
		code, msg := s.status(r, err)
		writeError(w, code, msg)
		return
	}
	writeJSON(w, map[string]any{"series": sums, "serverVersion": version})
}

// target is the series and range a request names.
type target struct {
	series   almanac.Series
	from, to time.Time
	// extent is the series' stored range (from = to when it has no slots).
	lo, hi time.Time
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
	t := target{series: info.Series}
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
			if *p.at, err = almanac.ParseTime(text, t.series.Location()); err != nil {
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
	// AsOf is when the counts were read (they may come from the cache).
	AsOf string `json:"asOf"`
}

// heatmap returns the calendar of [from, to) of g, from the cache when it
// is fresh, and when it was read.
func (s *server) heatmap(ctx context.Context, g almanac.Series, from, to time.Time, buckets int) (almanac.Heatmap, time.Time, error) {
	key := fmt.Sprintf("%q %s %d %d %d", g.Name(), g.Interval(), from.UnixMicro(), to.UnixMicro(), buckets)
	return s.cache.get(ctx, key, func() (almanac.Heatmap, error) {
		return s.client.Heatmap(ctx, g, from, to, buckets)
	})
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
		if h, at, err = s.heatmap(r.Context(), t.series, t.from, t.to, s.buckets(r)); err == nil {
			out := heatmap{Series: t.series.Name(), Shown: almanac.PrintableName(t.series.Name()),
				Interval: t.series.Interval().String(), Zone: t.series.Location().String(),
				From: almanac.FormatTime(h.From), To: almanac.FormatTime(h.To), FromText: human(h.From), ToText: human(h.To), Unit: h.Unit, Step: h.Step,
				Rows: layout(h, t.series.Interval()), Total: countsOf(h.Total),
				OldestOpen: human(h.OldestOpen), LastCompleted: human(h.LastCompleted),
				Whole: span{almanac.FormatTime(t.lo), almanac.FormatTime(t.hi)}}
			out.Covered = out.Total.covered()
			out.AsOf = at.In(t.series.Location()).Format("15:04:05 MST")
			if a, b, ok := enclosing(h.From, h.To, t.lo, t.hi); ok {
				out.Up = &span{almanac.FormatTime(a), almanac.FormatTime(b)}
			}
			writeJSON(w, out)
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
}

func (s *server) apiFailures(w http.ResponseWriter, r *http.Request) {
	t, err := s.target(r, r.URL.Query().Get)
	if err == nil {
		var fs []almanac.FailedSlot
		if fs, err = s.client.FailedSlots(r.Context(), t.series, t.from, t.to, maxFailures); err == nil {
			out := make([]failure, len(fs))
			for i, f := range fs {
				state := "failed"
				if f.Parked {
					state = "parked"
				}
				out[i] = failure{Slot: almanac.FormatTime(f.Start), SlotText: human(f.Start), State: state,
					Attempts: f.Attempts, FailCount: f.FailCount, Message: f.Message, At: human(f.At),
					NotBefore: human(f.NotBefore)}
			}
			writeJSON(w, map[string]any{"failures": out, "limit": maxFailures})
			return
		}
	}
	code, msg := s.status(r, err)
	writeError(w, code, msg)
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
		at, err = almanac.ParseTime(q.Get("slot"), t.series.Location())
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
	writeJSON(w, out)
}

// apiAction re-opens, skips or retries a range, for an authorized request
// that gives a reason.
func (s *server) apiAction(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r) {
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
		err = almanac.CheckReason(reason)
	}
	var result string
	if err == nil {
		ctx := r.Context()
		switch action {
		case "reopen":
			var res almanac.ReopenResult
			res, err = s.client.Reopen(ctx, t.series, t.from, t.to, almanac.ReopenOptions{Reason: reason})
			result = fmt.Sprintf("re-opened %d slots%s", res.Reopened, held(len(res.Held)))
		case "skip":
			var res almanac.SkipResult
			res, err = s.client.SkipRange(ctx, t.series, t.from, t.to, almanac.SkipOptions{Reason: reason})
			result = fmt.Sprintf("skipped %d slots (%d missing ones created as skipped)%s", res.Skipped+res.Inserted, res.Inserted, held(len(res.Held)))
		case "retry":
			// Retry records its own message in the history; the reason
			// goes to the log with the rest of the action.
			var res almanac.RetryResult
			res, err = s.client.Retry(ctx, t.series, t.from, t.to, almanac.RetryOptions{})
			result = fmt.Sprintf("retrying %d slots now (%d were parked)%s", res.Retried, res.Unparked, held(len(res.Held)))
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
		"from", almanac.FormatTime(t.from), "to", almanac.FormatTime(t.to), "reason", reason,
		"remote", r.RemoteAddr, "result", result)
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
