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
// or a person's token of Options.Users (as an Authorization bearer, or once
// in the page's login form), or is named by an authenticating proxy
// (Options.UserHeader), each asking for a reason, and protected against
// cross-site requests (a per-session token, SameSite cookies and an Origin
// check). Wrong tokens are limited per client address and in all.
//
// It answers only requests sent to a loopback name or address, or to one
// of Options.Hosts, so that another site cannot read it through a
// browser on this machine by pointing its own name here (DNS rebinding).
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
	"github.com/almanacdev/almanac/internal/redact"
)

// Defaults of Options, stated on its fields.
const (
	defaultBuckets    = 1000
	defaultCacheTTL   = 10 * time.Second
	defaultSessionTTL = 12 * time.Hour
	defaultRefresh    = 10 * time.Second
)

// heatmapWait bounds how long a calendar waits for its turn before it is
// answered 503.
const heatmapWait = 20 * time.Second

// Options configure the Handler. The zero value serves a read-only page.
type Options struct {
	// Hosts are the host names and addresses (the Host header, its port
	// aside; names without regard to case) the page answers to besides the
	// loopback ones it always answers to: localhost, *.localhost,
	// 127.0.0.0/8 and ::1. "*" answers every host, for a page behind a
	// proxy that checks the host itself. Other requests get 421
	// Misdirected Request and no data. Default: loopback only.
	Hosts []string
	// AllowActions offers re-open, skip and retry of a range on the page
	// and its API. They need Token, Users or UserHeader: without any they
	// stay refused.
	AllowActions bool
	// Token is a secret an operator presents to act: as "Authorization:
	// Bearer TOKEN", or in the page's login form, which starts a session.
	// Its holder's actions are recorded in the slots' history as the
	// client's Options.Actor. Compared in constant time; never logged or
	// shown. Use at least 128 random bits (openssl rand -hex 32): wrong
	// tries are limited, not refused for good.
	Token string
	// Users maps each person's token to their name, which the slots'
	// history records as the actor of what they do (as
	// almanac.Options.Actor: at most 200 bytes, one line). Presented as
	// Token is.
	Users map[string]string
	// UserHeader names a request header that an authenticating proxy in
	// front of the page sets to the name of the person it let in: a
	// request carrying it acts as that person, without a token, and the
	// history records the name. Off by default. Set it only when every
	// request reaches the page through that proxy, and the proxy removes
	// the header from what clients send: otherwise anyone can claim any
	// name.
	UserHeader string
	// MaxHeatmaps bounds the calendars computed at once for the page's
	// calendar requests (each reads a range of a series, and a million
	// slots take a good fraction of a second); more wait their turn, up to
	// 20 s, then are answered 503. The series table and the other
	// requests do not wait for them: give the client's pool more
	// connections than this. Default 2.
	MaxHeatmaps int
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
	// Refresh is how often an open page asks whether what it shows
	// changed, while it is visible: an unchanged answer is a 304 without
	// a body (an entity tag of the data), a changed one is redrawn in
	// place. Below CacheTTL the counts still change only every CacheTTL.
	// Default 10 s; negative: only on reload.
	Refresh time.Duration
	// Logger receives the actions taken (who, what, why) and the errors
	// that are answered with a generic message, with passwords hidden
	// (a reason may quote a connection URL). Default: silent.
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
	guesses  *guesses
	proxyKey []byte        // the key of proxyCSRF
	heavy    chan struct{} // a slot per calendar being computed
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
	if opts.MaxHeatmaps <= 0 {
		opts.MaxHeatmaps = defaults.MaxHeatmaps
	}
	if opts.Refresh == 0 {
		opts.Refresh = defaultRefresh
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Logger = slog.New(redact.Handler(opts.Logger.Handler()))
	s := &server{client: client, opts: opts, sessions: newSessions(opts.SessionTTL), cache: newCache(opts.CacheTTL),
		guesses: newGuesses(time.Now), proxyKey: []byte(randomToken()), heavy: make(chan struct{}, opts.MaxHeatmaps)}
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
	return RestrictHosts(secureHeaders(mux), opts.Hosts)
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
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, r.Context().Err()):
		return http.StatusServiceUnavailable, "the request was canceled"
	default:
		s.opts.Logger.Error("almanac web: request failed", "path", r.URL.Path, "error", err)
		return http.StatusInternalServerError, "internal error; see the server's log"
	}
}
