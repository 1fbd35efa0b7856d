package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/almanacdev/almanac"
)

// The operations endpoints (almanac run --http, and any command that serves
// HTTP): Prometheus metrics, liveness and readiness.

// serviceName is the OpenTelemetry service.name of the CLI's metrics
// (target_info{service_name="almanac"}), unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES says otherwise.
const serviceName = "almanac"

// newMetrics returns a meter provider whose metrics a Prometheus scrape of
// the returned registry reads, beside the Go runtime's (go_*) and the
// process's (process_*: CPU, memory, open files). The registry is the
// process's own, not the global one, so nothing else registers into it.
func newMetrics() (*sdkmetric.MeterProvider, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	// The environment's attributes come after ours, so they win.
	res, err := resource.New(context.Background(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", serviceName)), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res)), reg, nil
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
	srv := defaultHTTPLimits.server(handler)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(defaultHTTPLimits.listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
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

// httpLimits bound what clients can hold of an HTTP server almanac runs: a
// request's headers must arrive within readHeader and the whole request
// within read, an answer must be written within write, an idle keep-alive
// connection is closed after idle, and at most conns connections are open
// at once (more wait to be accepted). A client that sends slowly holds a
// connection for read at most, and many of them hold conns at most.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	conns                         int
}

// defaultHTTPLimits are those of almanac serve and --http. Requests are
// small; an answer may wait up to 20 s for its turn to compute a calendar
// (web.Options.MaxHeatmaps).
var defaultHTTPLimits = httpLimits{readHeader: 10 * time.Second, read: 15 * time.Second, write: time.Minute, idle: time.Minute, conns: 100}

// maxHeaderBytes bounds a request's headers.
const maxHeaderBytes = 64 << 10

// server returns an http.Server of h with l's timeouts.
func (l httpLimits) server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: l.readHeader, ReadTimeout: l.read, WriteTimeout: l.write,
		IdleTimeout: l.idle, MaxHeaderBytes: maxHeaderBytes}
}

// listener returns ln accepting at most l.conns connections at a time: its
// Accept waits while that many are open.
func (l httpLimits) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, open: make(chan struct{}, l.conns), closed: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	open      chan struct{} // one element per connection open
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.open <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.open
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.open })}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn gives its place back when closed, once.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
