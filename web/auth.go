package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/almanacdev/almanac/internal/input"
)

// sessionCookie names the cookie of a login.
const sessionCookie = "almanac_session"

// maxSessions bounds the logins kept; the oldest goes first.
const maxSessions = 1000

// session is one login: who logged in, its CSRF token and when it ends.
type session struct {
	actor   string // the person (Options.Users); "" for the shared Token
	csrf    string
	expires time.Time
}

// sessions are the logins of a Handler, in memory: a restart logs everyone
// out, which is what a page for operators wants.
type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]session
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[string]session{}}
}

// start begins a session of actor and returns its id.
func (ss *sessions) start(now time.Time, actor string) (string, session) {
	id, sess := randomToken(), session{actor: actor, csrf: randomToken(), expires: now.Add(ss.ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		var oldest string
		for k, v := range ss.m {
			if v.expires.Before(now) {
				delete(ss.m, k)
			} else if oldest == "" || v.expires.Before(ss.m[oldest].expires) {
				oldest = k
			}
		}
		if len(ss.m) >= maxSessions {
			delete(ss.m, oldest)
		}
	}
	ss.m[id] = sess
	return id, sess
}

// get returns the live session of r's cookie.
func (ss *sessions) get(r *http.Request, now time.Time) (string, session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", session{}, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sess, ok := ss.m[c.Value]
	if ok && sess.expires.Before(now) {
		delete(ss.m, c.Value)
		return "", session{}, false
	}
	return c.Value, sess, ok
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// randomToken returns 256 random bits, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand aborts the program instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// equal compares secrets in constant time, whatever their lengths.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// actionsOn reports whether actions can be taken at all.
func (s *server) actionsOn() bool {
	return s.opts.AllowActions && (s.tokens() || s.opts.UserHeader != "")
}

// tokens reports whether a token can log in.
func (s *server) tokens() bool { return s.opts.Token != "" || len(s.opts.Users) > 0 }

// person returns whose token token is: "" for the shared Token, else the
// name Users gives it. Every token is compared, in constant time.
func (s *server) person(token string) (name string, ok bool) {
	if token == "" {
		return "", false
	}
	if s.opts.Token != "" && equal(token, s.opts.Token) {
		ok = true
	}
	for t, n := range s.opts.Users {
		if equal(token, t) {
			name, ok = n, true
		}
	}
	return name, ok
}

// bearer returns the token of r's Authorization header, if it has one.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.TrimSpace(tok), ok && strings.EqualFold(scheme, "Bearer")
}

// proxyUser returns the person the authenticating proxy names in the
// UserHeader, when one is configured and r carries it.
func (s *server) proxyUser(r *http.Request) (string, bool) {
	if s.opts.UserHeader == "" {
		return "", false
	}
	name := r.Header.Get(s.opts.UserHeader)
	return name, name != ""
}

// proxyCSRF is the CSRF token of a person named by the proxy: a MAC of the
// name under a key of this Handler, so it needs no session.
func (s *server) proxyCSRF(name string) string {
	mac := hmac.New(sha256.New, s.proxyKey)
	mac.Write([]byte(name))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// guess spends one try of a token for r's client; when none is left it
// answers 429 itself, with the wait in Retry-After, and returns nil.
func (s *server) guess(w http.ResponseWriter, r *http.Request, answer func(code int, problem string)) (refund func()) {
	refund, wait, own := s.guesses.take(r.RemoteAddr)
	if refund != nil {
		return refund
	}
	secs := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	who := "on this page"
	if own {
		who = "from your address"
	}
	answer(http.StatusTooManyRequests, fmt.Sprintf("Too many wrong tokens %s; try again in %d s.", who, secs))
	return nil
}

// sameOrigin reports whether a state-changing request comes from this
// page: its Origin (or, without one, its Referer) names r's host. Browsers
// send Origin with every POST; a request with neither is refused, as a
// bearer-less client has no business posting.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" || src == "null" {
		return false
	}
	u, err := url.Parse(src)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// authorize checks an action request and returns who makes it ("" for
// the holder of the shared Token): a bearer token (which a browser never
// sends by itself); else the person the authenticating proxy names
// (UserHeader) with the CSRF token the page gave them, from the page's
// origin; else a session with its CSRF token in the X-CSRF-Token header,
// from the page's origin. It answers the refusal itself.
func (s *server) authorize(w http.ResponseWriter, r *http.Request) (actor string, ok bool) {
	if !s.actionsOn() {
		writeError(w, http.StatusForbidden, "actions are disabled: start the page with actions allowed and a token (almanac serve --allow-actions)")
		return "", false
	}
	if token, ok := bearer(r); ok {
		refund := s.guess(w, r, func(code int, problem string) { writeError(w, code, problem) })
		if refund == nil {
			return "", false
		}
		name, ok := s.person(token)
		if !ok {
			s.opts.Logger.Warn("almanac web: wrong bearer token", "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="almanac"`)
			writeError(w, http.StatusUnauthorized, "wrong token")
			return "", false
		}
		refund()
		if r.Header.Get("Origin") != "" && !sameOrigin(r) {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return "", false
		}
		return name, true
	}
	if name, ok := s.proxyUser(r); ok {
		if err := input.CheckActor(name); err != nil {
			writeError(w, http.StatusForbidden, fmt.Sprintf("the user the authenticating proxy names in %s cannot be recorded: %v", s.opts.UserHeader, err))
			return "", false
		}
		if !sameOrigin(r) || !equal(r.Header.Get("X-CSRF-Token"), s.proxyCSRF(name)) {
			writeError(w, http.StatusForbidden, "cross-site request refused: reload the page")
			return "", false
		}
		return name, true
	}
	_, sess, ok := s.sessions.get(r, time.Now())
	if !ok {
		if !s.tokens() {
			writeError(w, http.StatusUnauthorized, "no user: the authenticating proxy named none in "+s.opts.UserHeader)
			return "", false
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="almanac"`)
		writeError(w, http.StatusUnauthorized, "log in with the token first")
		return "", false
	}
	if !sameOrigin(r) || !equal(r.Header.Get("X-CSRF-Token"), sess.csrf) {
		writeError(w, http.StatusForbidden, "cross-site request refused: reload the page")
		return "", false
	}
	return sess.actor, true
}

// cookiePath is where the handler is mounted: the request's path minus
// what the mux saw, so a session covers this page only.
func cookiePath(r *http.Request) string {
	full := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		full = u.Path
	}
	return strings.TrimSuffix(full, r.URL.Path) + "/"
}

func (s *server) setSession(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: cookiePath(r), MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

// loginPage shows the form that takes the token.
func (s *server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.renderLogin(w, http.StatusOK, "")
}

func (s *server) renderLogin(w http.ResponseWriter, code int, problem string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = pages.ExecuteTemplate(w, "login.html", map[string]any{"Enabled": s.actionsOn(), "Tokens": s.tokens(),
		"Header": s.opts.UserHeader, "Problem": problem})
}

// login starts a session for a right token, from this page only.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if !s.actionsOn() || !s.tokens() {
		s.renderLogin(w, http.StatusForbidden, "Actions are disabled on this page.")
		return
	}
	if !sameOrigin(r) {
		s.renderLogin(w, http.StatusForbidden, "Cross-site login refused.")
		return
	}
	refund := s.guess(w, r, func(code int, problem string) { s.renderLogin(w, code, problem) })
	if refund == nil {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	name, ok := s.person(r.PostFormValue("token"))
	if !ok {
		s.opts.Logger.Warn("almanac web: login refused", "remote", r.RemoteAddr)
		s.renderLogin(w, http.StatusUnauthorized, "Wrong token.")
		return
	}
	refund()
	id, _ := s.sessions.start(time.Now(), name)
	s.setSession(w, r, id, int(s.opts.SessionTTL/time.Second))
	s.opts.Logger.Info("almanac web: login", "actor", actorText(name), "remote", r.RemoteAddr)
	http.Redirect(w, r, "./", http.StatusSeeOther)
}

// actorText names who acts in the log: the person, or the holder of the
// shared token.
func actorText(name string) string {
	if name == "" {
		return "(shared token)"
	}
	return name
}

// logout ends the session; it needs the session's CSRF token like an
// action, so another site cannot log an operator out.
func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	id, sess, ok := s.sessions.get(r, time.Now())
	if ok && sameOrigin(r) && equal(r.PostFormValue("csrf"), sess.csrf) {
		s.sessions.end(id)
		s.setSession(w, r, "", -1)
	}
	http.Redirect(w, r, "./", http.StatusSeeOther)
}
