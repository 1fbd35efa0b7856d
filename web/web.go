// Package web serves almanac's coverage page: every series with its slots
// by state, a coverage calendar per series (a heatmap of slots by state,
// zoomable from years down to single slots), the failed and parked slots
// with their messages, and a slot's history. Mount it in a service of your
// own, or run it with `almanac serve`:
//
//	mux.Handle("/almanac/", http.StripPrefix("/almanac", web.Handler(client, web.Options{})))
//
// The page is read-only unless Options.AllowActions is set: then re-open,
// skip and retry of a range are offered to whoever presents Options.Token
// (as an Authorization bearer, or once in the page's login form), each
// asking for a reason, and protected against cross-site requests (a
// per-session token, SameSite cookies and an Origin check).
//
// Everything is served from the binary (html/template, embedded assets,
// a small script without a build step). Every figure comes from aggregate
// queries (Client.Heatmap): the page's cost grows with the cells shown,
// never with the slots.
package web

import (
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/defaults"
)

// Defaults of Options, stated on its fields.
const (
	defaultBuckets    = 1000
	defaultCacheTTL   = 10 * time.Second
	defaultSessionTTL = 12 * time.Hour
)

// Options configure the Handler. The zero value serves a read-only page.
type Options struct {
	// AllowActions offers re-open, skip and retry of a range on the page
	// and its API. They need Token: without one they stay refused.
	AllowActions bool
	// Token is the secret an operator presents to act: as "Authorization:
	// Bearer TOKEN", or in the page's login form, which starts a session.
	// Compared in constant time; never logged or shown.
	Token string
	// Buckets is the most cells a coverage calendar shows at once (1 to
	// 10,000). Default 1000.
	Buckets int
	// CacheTTL is how long a computed calendar (and a series' totals) is
	// reused for the same view: the calendar of a whole series reads all
	// of its rows, about half a second for a million slots. The page says
	// how old what it shows is, and an action taken through the page
	// drops every cached view. Default 10 s; negative: never
	// reuse.
	CacheTTL time.Duration
	// SessionTTL is how long a login lasts. Default 12 h.
	SessionTTL time.Duration
	// Logger receives the actions taken (who, what, why) and the errors
	// that are answered with a generic message. Default: silent.
	Logger *slog.Logger
}

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"pct": func(p float64) string { return formatPct(p) },
}).ParseFS(assets, "assets/*.html"))

// server is the state of one Handler.
type server struct {
	client   *almanac.Client
	opts     Options
	sessions *sessions
	cache    *cache
}

// Handler returns the coverage page and its JSON API, for client's series.
// Its paths are relative ("", "api/…", "assets/…"), so it can be mounted
// under any prefix with http.StripPrefix.
func Handler(client *almanac.Client, opts Options) http.Handler {
	if opts.Buckets <= 0 || opts.Buckets > defaults.MaxHeatmapBuckets {
		opts.Buckets = defaultBuckets
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = defaultCacheTTL
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = defaultSessionTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{client: client, opts: opts, sessions: newSessions(opts.SessionTTL), cache: newCache(opts.CacheTTL)}
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /api/series", s.apiSeries)
	mux.HandleFunc("GET /api/heatmap", s.apiHeatmap)
	mux.HandleFunc("GET /api/failures", s.apiFailures)
	mux.HandleFunc("GET /api/history", s.apiHistory)
	mux.HandleFunc("POST /api/action", s.apiAction)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	return secureHeaders(mux)
}

// secureHeaders keeps the page from being framed, sniffed, or made to run
// anything but its own script.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// status maps an error of the client to an HTTP status and the text shown:
// input errors say what was wrong, the rest is logged and answered
// generically (a driver's text may name hosts).
func (s *server) status(r *http.Request, err error) (int, string) {
	switch {
	case errors.Is(err, almanac.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, almanac.ErrUnknownSeries):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, almanac.ErrUnavailable):
		s.opts.Logger.Warn("almanac web: database unavailable", "path", r.URL.Path, "error", err)
		return http.StatusServiceUnavailable, "the database is unavailable; try again shortly"
	case errors.Is(err, r.Context().Err()):
		return http.StatusServiceUnavailable, "the request was canceled"
	default:
		s.opts.Logger.Error("almanac web: request failed", "path", r.URL.Path, "error", err)
		return http.StatusInternalServerError, "internal error; see the server's log"
	}
}
