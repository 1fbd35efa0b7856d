package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// sessionCookie names the cookie of a login.
const sessionCookie = "almanac_session"

// maxSessions bounds the logins kept; the oldest goes first.
const maxSessions = 1000

// session is one login: its CSRF token and when it ends.
type session struct {
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

// start begins a session and returns its id.
func (ss *sessions) start(now time.Time) (string, session) {
	id, sess := randomToken(), session{csrf: randomToken(), expires: now.Add(ss.ttl)}
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
func (s *server) actionsOn() bool { return s.opts.AllowActions && s.opts.Token != "" }

// bearer reports whether r carries the token as an Authorization bearer.
func (s *server) bearer(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	return ok && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(tok), s.opts.Token)
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

// authorize checks an action request: the bearer token, or a session with
// its CSRF token in the X-CSRF-Token header, from the page's origin. It
// answers the refusal itself.
func (s *server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if !s.actionsOn() {
		writeError(w, http.StatusForbidden, "actions are disabled: start the page with actions allowed and a token (almanac serve --allow-actions)")
		return false
	}
	if s.bearer(r) {
		if r.Header.Get("Origin") != "" && !sameOrigin(r) {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return false
		}
		return true
	}
	_, sess, ok := s.sessions.get(r, time.Now())
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="almanac"`)
		writeError(w, http.StatusUnauthorized, "log in with the token first")
		return false
	}
	if !sameOrigin(r) || !equal(r.Header.Get("X-CSRF-Token"), sess.csrf) {
		writeError(w, http.StatusForbidden, "cross-site request refused: reload the page")
		return false
	}
	return true
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
	_ = pages.ExecuteTemplate(w, "login.html", map[string]any{"Enabled": s.actionsOn(), "Problem": problem})
}

// login starts a session for the right token, from this page only.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if !s.actionsOn() {
		s.renderLogin(w, http.StatusForbidden, "Actions are disabled on this page.")
		return
	}
	if !sameOrigin(r) {
		s.renderLogin(w, http.StatusForbidden, "Cross-site login refused.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !equal(r.PostFormValue("token"), s.opts.Token) {
		s.opts.Logger.Warn("almanac web: login refused", "remote", r.RemoteAddr)
		s.renderLogin(w, http.StatusUnauthorized, "Wrong token.")
		return
	}
	id, _ := s.sessions.start(time.Now())
	s.setSession(w, r, id, int(s.opts.SessionTTL/time.Second))
	s.opts.Logger.Info("almanac web: login", "remote", r.RemoteAddr)
	http.Redirect(w, r, "./", http.StatusSeeOther)
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
