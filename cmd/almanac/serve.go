package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/almanacdev/almanac"
	"github.com/almanacdev/almanac/internal/input"
	"github.com/almanacdev/almanac/web"
)

// defaultServeAddr keeps the page on this machine unless told otherwise.
const defaultServeAddr = "127.0.0.1:8080"

// minTokenLen refuses tokens short enough to guess.
const minTokenLen = 16

func (a *app) serveCommand() *cobra.Command {
	var addr, tokenFile string
	var allowActions bool
	cmd := &cobra.Command{
		Use:   "serve [--http ADDR] [--allow-actions --token-file F]",
		Short: "Serve the coverage page: every series, a coverage calendar, failures and history",
		Long: `Serve a web page showing every series with its slots by state, a coverage
calendar per series (a heatmap of complete, skipped, open, in-flight, failed,
parked and missing slots, zoomable from years down to single slots, drawn in
the series' time zone), the failed and parked slots with their messages, and
each slot's history.

The page is read-only unless --allow-actions is given: then re-open, skip and
retry of a range are offered to whoever presents the token (read from
--token-file, else $ALMANAC_TOKEN; at least 16 characters), as a bearer token
or in the page's login form. Each action asks for a reason, and the slots'
history records it as done by --actor.

Beside the page it serves Prometheus /metrics (the open-slot and freshness
gauges of every series, and the counts of the actions taken on the page),
/healthz and /readyz (200 once the database answers and the schema is
migrated), as almanac run --http does.

It listens on 127.0.0.1 unless --http names another address; put it behind
TLS before exposing it beyond the machine. It runs until interrupted.`,
		Example: `  almanac serve
  almanac serve --http 127.0.0.1:9000
  almanac serve --allow-actions --token-file ./token`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkServeAddr(addr); err != nil {
				return err
			}
			token := ""
			if allowActions {
				var err error
				if token, err = a.readToken(tokenFile); err != nil {
					return err
				}
			} else if tokenFile != "" {
				return usagef("--token-file is only used with --allow-actions")
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
			// mounted beside it.
			mux.Handle("/", web.Handler(client, web.Options{AllowActions: allowActions, Token: token, Logger: a.logger()}))
			ops := opsMux(client, registry, almanac.ReadyOptions{})
			for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
				mux.Handle(path, ops)
			}
			return a.serve(cmd.Context(), ln, mux, allowActions)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "http", defaultServeAddr, "address to listen on, HOST:PORT (port 0 picks a free one)")
	fl.BoolVar(&allowActions, "allow-actions", false, "offer re-open, skip and retry on the page, to holders of the token")
	fl.StringVar(&tokenFile, "token-file", "", "file holding the token that allows actions (default: $ALMANAC_TOKEN)")
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

// readToken reads the actions' token from file, else $ALMANAC_TOKEN. The
// token is never printed.
func (a *app) readToken(file string) (string, error) {
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
	case token == "" && file == "":
		return "", usagef("--allow-actions needs a token: --token-file FILE or ALMANAC_TOKEN (at least %d characters)", minTokenLen)
	case len(token) < minTokenLen || strings.ContainsAny(token, " \t\r\n"):
		return "", usagef("the token from %s is too short or holds spaces: expected at least %d characters on one line", from, minTokenLen)
	}
	return token, nil
}

// serve runs the HTTP server on ln until ctx ends, then lets requests in
// progress finish for a few seconds.
func (a *app) serve(ctx context.Context, ln net.Listener, h http.Handler, actions bool) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	mode := "read-only"
	if actions {
		mode = "actions allowed with the token"
	}
	fmt.Fprintf(a.stderr, "almanac: serving the coverage page on http://%s/ (%s)\n", ln.Addr(), mode)
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(a.stderr, "almanac: %s is reachable from other machines; put TLS in front of it\n", ln.Addr())
	}
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
