package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/almanacdev/almanac"
)

// The operations endpoints (almanac run --http, and any command that serves
// HTTP): Prometheus metrics, liveness and readiness.

// newMetrics returns a meter provider whose metrics a Prometheus scrape of
// the returned registry reads. The registry is the process's own, not the
// global one, so nothing else registers into it.
func newMetrics() (*sdkmetric.MeterProvider, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), reg, nil
}

// readyTimeout bounds one /readyz check.
const readyTimeout = 5 * time.Second

// opsMux serves /metrics (reg in the Prometheus text format), /healthz (200
// while the process serves) and /readyz (200 when c.Ready with ready
// passes: the database answers, the schema is migrated and, with
// ready.Jobs, a job is registered; 503 with the reason otherwise).
func opsMux(c *almanac.Client, reg *prometheus.Registry, ready almanac.ReadyOptions) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := c.Ready(ctx, ready); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			// The client's errors never quote the connection URL.
			fmt.Fprintln(w, "not ready: "+oneLine(err.Error()))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// httpAddr reads --http: HOST:PORT, :PORT or PORT. A bare port binds to
// 127.0.0.1 (the metrics are not for the whole network unless asked);
// ":PORT" binds to every interface.
func httpAddr(text string) (string, error) {
	if n, err := strconv.Atoi(text); err == nil {
		if n < 0 || n > 65535 {
			return "", usagef("--http %q: expected a port from 0 to 65535, or HOST:PORT", text)
		}
		return net.JoinHostPort("127.0.0.1", text), nil
	}
	_, port, err := net.SplitHostPort(text)
	if err != nil {
		return "", usagef("--http %q: expected HOST:PORT, :PORT or PORT, e.g. 127.0.0.1:9090", text)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", usagef("--http %q: expected a port from 0 to 65535", text)
	}
	return text, nil
}

// serveOps listens on addr and serves handler until the returned stop is
// called. It fails at once when addr cannot be bound (in use, no such
// interface).
func (a *app) serveOps(addr string, handler http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, problemError(fmt.Errorf("--http %s: %w", addr, err))
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger().Error("almanac: the HTTP server stopped", "error", err)
		}
	}()
	a.logger().Info("almanac: serving /metrics, /healthz and /readyz", "address", "http://"+ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
