package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/defaults"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/web"
)

// defaultServeAddr keeps the page on this machine unless told otherwise.
const defaultServeAddr = "127.0.0.1:8080"

func (a *app) serveCommand() *cobra.Command {
	var addr, tokenFile, usersFile, userHeader string
	var hosts []string
	var allowActions bool
	cmd := &cobra.Command{
		Use:   "serve [--http ADDR] [--allow-actions --token-file F | --users-file F | --user-header H]",
		Short: "Serve the coverage page: every series, a coverage calendar, failures and history",
		Long: `Serve a web page showing every series with its slots by state, a coverage
calendar per series (a heatmap of complete, skipped, open, in-flight, failed,
parked and missing slots, zoomable from years down to single slots, drawn in
the series' time zone), the failed and parked slots with their messages, and
each slot's history.

The page is read-only unless --allow-actions is given: then re-open, skip and
retry of a range are offered, each asking for a reason, to
  - the holders of the shared token (--token-file, else $ALMANAC_TOKEN),
    recorded in the slots' history as --actor;
  - each person of --users-file, a file of lines "NAME TOKEN", recorded as
    NAME;
  - with --user-header, whoever an authenticating proxy in front of the page
    names in that header, recorded as that name. Use it only when every
    request comes through that proxy and the proxy removes the header from
    what clients send: anyone who can set it can act as anyone.
A token is presented as a bearer token or in the page's login form; it must
carry at least 128 random bits: make one with openssl rand -hex 32. Wrong
tokens are limited per client address and in all (429 with the wait).

Beside the page it serves Prometheus /metrics (the open-slot and freshness
gauges of every series, and the counts of the actions taken on the page),
/healthz and /readyz (200 once the database answers and the schema is
migrated), as almanac run --http does.

It listens on 127.0.0.1 unless --http names another address; put it behind
TLS before exposing it beyond the machine. It answers requests sent to
loopback names and addresses, to the address it listens on (every address
of the machine for 0.0.0.0 or ::) and to the names given with --allow-host;
others get 421, so that a web site cannot read the page through a browser
on this machine by pointing its own name here. It runs until interrupted.`,
		Example: `  almanac serve
  almanac serve --http 0.0.0.0:8080 --allow-host almanac.example.com
  almanac serve --allow-actions --token-file ./token
  almanac serve --allow-actions --users-file ./users`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkServeAddr(addr); err != nil {
				return err
			}
			if err := checkHosts(hosts); err != nil {
				return err
			}
			opts := web.Options{AllowActions: allowActions, Hosts: servedHosts(addr, hosts), UserHeader: userHeader}
			if allowActions {
				var err error
				if opts.Token, err = a.readToken(tokenFile, usersFile != "" || userHeader != ""); err != nil {
					return err
				}
				if usersFile != "" {
					if opts.Users, err = readUsers(usersFile, opts.Token); err != nil {
						return err
					}
				}
				if err := checkHeaderName(userHeader); err != nil {
					return err
				}
			} else {
				for _, f := range [][2]string{{"--token-file", tokenFile}, {"--users-file", usersFile}, {"--user-header", userHeader}} {
					if f[1] != "" {
						return usagef("%s is only used with --allow-actions", f[0])
					}
				}
			}
			if err := input.CheckActor(a.actor); err != nil {
				return usageError(fmt.Errorf("--actor: %w", err))
			}
			a.logs = true
			meters, registry, err := newMetrics()
			if err != nil {
				return err
			}
			a.meters = meters
			// Room beside the calendars computed at once, so that the
			// series table, failures, history and actions never wait for
			// them.
			a.poolSize = defaults.MaxHeatmaps + 4
			client, err := a.connectMigrated(cmd.Context())
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usageError(fmt.Errorf("--http %s: %w", addr, err))
			}
			mux := http.NewServeMux()
			// The coverage page owns "/"; the operational endpoints are
			// mounted beside it, answering the same hosts.
			opts.Logger = a.logger()
			mux.Handle("/", web.Handler(client, opts))
			ops := web.RestrictHosts(opsMux(client, registry, almanac.ReadyOptions{}), opts.Hosts)
			for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
				mux.Handle(path, ops)
			}
			return a.serve(cmd.Context(), ln, mux, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "http", defaultServeAddr, "address to listen on, HOST:PORT (port 0 picks a free one)")
	fl.StringArrayVar(&hosts, "allow-host", nil, "a host name (or address) the page answers to besides loopback ones and the --http address (repeatable; * for any)")
	fl.BoolVar(&allowActions, "allow-actions", false, "offer re-open, skip and retry on the page, to holders of a token or people named by --user-header")
	fl.StringVar(&tokenFile, "token-file", "", "file holding the shared token that allows actions, recorded as --actor (default: $ALMANAC_TOKEN)")
	fl.StringVar(&usersFile, "users-file", "", `file of people allowed to act, one "NAME TOKEN" per line, each recorded as NAME`)
	fl.StringVar(&userHeader, "user-header", "", "request header in which an authenticating proxy names who acts, e.g. X-Forwarded-User (default: none trusted)")
	a.registerActor(cmd)
	return cmd
}

// checkServeAddr refuses an address that is not HOST:PORT.
func checkServeAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && !strings.ContainsAny(host, "/ ") {
		if n, perr := strconv.Atoi(port); perr == nil && n >= 0 && n <= 65535 {
			return nil
		}
	}
	return usagef("--http %q: expected HOST:PORT with a port from 0 to 65535, e.g. %s", addr, defaultServeAddr)
}

// checkHosts refuses an --allow-host that is no host name or address.
func checkHosts(hosts []string) error {
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, " \t/@?#") || !utf8.ValidString(h) {
			return usagef("--allow-host %q: expected a host name or address, such as almanac.example.com, or *", h)
		}
	}
	return nil
}

// servedHosts are the hosts the page answers to besides loopback ones:
// --allow-host's, and the address --http listens on, or for a wildcard
// address every address of the machine's interfaces. An address is no
// name another site can point here.
func servedHosts(addr string, allowed []string) []string {
	out := slices.Clone(allowed)
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return append(out, host)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// checkHeaderName refuses a --user-header that is not an HTTP header name.
func checkHeaderName(name string) error {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return usagef("--user-header %q: expected an HTTP header name, such as X-Forwarded-User", name)
		}
	}
	return nil
}

// minTokenBits is the least randomness tokenBits must find in a token.
// Tokens of 128 random bits score from about 100 (22 base64 characters)
// up; 96 random bits about 75 to 95.
const minTokenBits = 100

// tokenBits estimates the random bits a token carries from its
// characters: its length times the entropy of their frequencies, with the
// Miller-Madow correction for short samples. A repeated character scores
// 0, a repeated word little; what it cannot tell is a random string from a
// memorable one of varied characters, so the rule is a floor, not a
// measure.
func tokenBits(token string) float64 {
	counts := map[rune]int{}
	n := 0
	for _, r := range token {
		counts[r]++
		n++
	}
	if n == 0 {
		return 0
	}
	h := float64(len(counts)-1) / (2 * float64(n) * math.Ln2)
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	return h * float64(n)
}

// checkToken refuses a token (read from from) that holds spaces or looks
// guessable. The token is never printed.
func checkToken(token, from string) error {
	if strings.ContainsAny(token, " \t\r\n") || !utf8.ValidString(token) {
		return usagef("the token from %s holds spaces or invalid UTF-8: expected one word, at least 128 bits from a random generator, e.g. openssl rand -hex 32", from)
	}
	if bits := tokenBits(token); bits < minTokenBits {
		return usagef("the token from %s looks guessable (its characters carry about %.0f random bits): expected at least 128 bits from a random generator, e.g. openssl rand -hex 32", from, bits)
	}
	return nil
}

// readToken reads the shared token from file, else $ALMANAC_TOKEN; none is
// fine when others can act (optional). The token is never printed.
func (a *app) readToken(file string, optional bool) (string, error) {
	token, from := a.getenv("ALMANAC_TOKEN"), "ALMANAC_TOKEN"
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("--token-file: %v", err)
		}
		token, from = string(b), "--token-file "+file
	}
	token = strings.TrimSpace(token)
	switch {
	case token == "" && file == "" && optional:
		return "", nil
	case token == "" && file == "":
		return "", usagef("--allow-actions needs who may act: --token-file FILE or ALMANAC_TOKEN (make one with openssl rand -hex 32), --users-file FILE, or --user-header NAME")
	}
	return token, checkToken(token, from)
}

// readUsers reads --users-file: one person per line, their name, then
// their token as the line's last word; blank lines and lines starting with
// # are skipped. Names must be storable as actors; tokens must pass
// checkToken, differ from each other and from the shared token. No token is
// ever printed.
func readUsers(file, shared string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("--users-file: %v", err)
	}
	users := map[string]string{}
	lineOf := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		at := fmt.Sprintf("--users-file %s line %d", file, i+1)
		cut := strings.LastIndexAny(line, " \t")
		if cut < 0 {
			return nil, usagef("%s: expected a name, then a token: NAME TOKEN, e.g. alice@example.com followed by the output of openssl rand -hex 32", at)
		}
		name, token := strings.TrimSpace(line[:cut]), line[cut+1:]
		if err := input.CheckActor(name); err != nil {
			return nil, usageError(fmt.Errorf("%s: %w", at, err))
		}
		if err := checkToken(token, at); err != nil {
			return nil, err
		}
		if n, ok := lineOf[token]; ok {
			return nil, usagef("%s: the token is line %d's too: expected a token of one's own per person", at, n)
		}
		if token == shared {
			return nil, usagef("%s: the token is the shared one (--token-file or ALMANAC_TOKEN): expected a token of one's own", at)
		}
		users[token], lineOf[token] = name, i+1
	}
	if len(users) == 0 {
		return nil, usagef("--users-file %s names nobody: expected lines of NAME TOKEN", file)
	}
	return users, nil
}

// serve runs the HTTP server on ln until ctx ends, then lets requests in
// progress finish for a few seconds.
func (a *app) serve(ctx context.Context, ln net.Listener, h http.Handler, opts web.Options) error {
	srv := defaultHTTPLimits.server(h)
	var who []string
	if opts.Token != "" {
		who = append(who, "the token")
	}
	if len(opts.Users) > 0 {
		who = append(who, nouns(len(opts.Users), "person's token", "people's tokens"))
	}
	if opts.UserHeader != "" {
		who = append(who, "the proxy's "+opts.UserHeader)
	}
	mode := "read-only"
	if opts.AllowActions {
		mode = "actions allowed with " + strings.Join(who, ", ")
	}
	url := fmt.Sprintf("http://%s/", ln.Addr())
	exposed := false
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		exposed = true
	}
	if a.logFormat == "json" {
		// Every line on stderr is a record: the start line is one too.
		log := a.logger()
		log.Info("almanac: serving the coverage page", "url", url, "mode", mode, "database", a.target)
		if exposed {
			log.Warn("almanac: reachable from other machines; put TLS in front of it", "addr", ln.Addr().String())
		}
		if opts.UserHeader != "" {
			log.Warn("almanac: whoever sets the user header acts as the name it holds: only an authenticating proxy that sets it, and removes it from what clients send, may reach the server",
				"header", opts.UserHeader, "addr", ln.Addr().String())
		}
	} else {
		fmt.Fprintf(a.stderr, "almanac: serving the coverage page on %s (%s)\n", url, mode)
		if exposed {
			fmt.Fprintf(a.stderr, "almanac: %s is reachable from other machines; put TLS in front of it\n", ln.Addr())
		}
		if opts.UserHeader != "" {
			fmt.Fprintf(a.stderr, "almanac: whoever sets %s acts as the name it holds: only an authenticating proxy that sets it, and removes it from what clients send, may reach %s\n", opts.UserHeader, ln.Addr())
		}
	}
	ln = defaultHTTPLimits.listener(ln)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
