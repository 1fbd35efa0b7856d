package web

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// hosts are the Host header values a Handler answers to.
type hosts struct {
	any   bool
	names map[string]bool // lower case, no trailing dot; addresses in netip's form
}

func newHosts(list []string) hosts {
	h := hosts{names: map[string]bool{}}
	for _, name := range list {
		if name == "*" {
			h.any = true
		}
		h.names[canonicalHost(name)] = true
	}
	return h
}

// canonicalHost returns a host name or address, with or without a port, as
// hosts keys it.
func canonicalHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return host
}

// allows reports whether a request naming host (the Host header) is one to
// answer: a loopback name or address, or one of the configured ones.
func (h hosts) allows(host string) bool {
	host = canonicalHost(host)
	switch {
	case host == "":
		return false
	case h.any, h.names[host], host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// RestrictHosts returns next answering only requests whose Host header (its
// port aside) is a loopback name or address (localhost, *.localhost,
// 127.0.0.0/8, ::1) or one of hosts (names, matched without regard to
// case, or addresses; "*" for any); others get 421 Misdirected Request and
// no data. Handler does this itself with Options.Hosts: use it for
// endpoints served beside the page, such as metrics.
//
// The check defeats DNS rebinding: a page on the internet whose name its
// owner then points at 127.0.0.1 is, to a browser on this machine, the
// same origin as this server, and could read everything it serves, but its
// requests still name the attacker's host.
func RestrictHosts(next http.Handler, hosts []string) http.Handler {
	allowed := newHosts(hosts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed.allows(r.Host) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusMisdirectedRequest)
			_, _ = w.Write([]byte("almanac: this server does not answer to the host name this request was sent to; add it to the allowed hosts (almanac serve --allow-host NAME)\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
