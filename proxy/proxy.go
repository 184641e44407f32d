// Package proxy is idemproxy's standalone reverse proxy: httputil.ReverseProxy
// wrapped by the idempotency core, configured from flags, IDEMPROXY_* variables and
// an optional file, with an admin listener for health, metrics and key inspection.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/tracing"
)

// Problem types the proxy answers itself.
const (
	// ProblemUpstream: a 502/504 when the upstream fails.
	ProblemUpstream = middleware.ProblemTypeBase + "upstream-unavailable"
	// ProblemPath: a 400 for a path that is not in canonical form (the core's
	// problem type; see middleware.CanonicalPath).
	ProblemPath = middleware.ProblemNonCanonicalPath
)

// Proxy serves clients: it routes each request to its route's idempotency handler
// and forwards first executions to the upstream. Its configuration can be
// swapped while it serves (Reload).
type Proxy struct {
	log      *slog.Logger
	metrics  *metrics
	tracing  bool
	cur      atomic.Pointer[state]
	mu       sync.Mutex     // one Reload at a time
	retiring sync.WaitGroup // states replaced by a reload, finishing
	// listenAddr is the clients' listener as bound (Run sets it before
	// serving): the Host an admin lookup assumes when given none.
	listenAddr string
}

type route struct {
	methods []string
	path    string // as configured
	match   string // path in route form (middleware.Canonical.Route)
	enabled bool
	h       *middleware.Handler
	counts  *prommetrics.RouteRequests // idemproxy_requests_total{route=…}
}

// New builds the proxy and opens its store. An unreachable Redis is an error.
func New(ctx context.Context, cfg *Config, log *slog.Logger) (*Proxy, error) {
	p := &Proxy{log: log, metrics: newMetrics(), tracing: cfg.tracing}
	st, _, err := p.newState(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	p.metrics.memory(st.store.opened.Store)
	p.cur.Store(st)
	return p, nil
}

// buildRoute builds the handler of the compiled route cr over st's store.
func (p *Proxy) buildRoute(st *state, cr compiledRoute) (*route, error) {
	s := cr.settings
	name := (&route{path: cr.path}).name()
	counts := p.metrics.requests.Route(name)
	s.Logger, s.Observer = p.log, func(ev middleware.Event) { p.observe(counts, ev) }
	if p.tracing {
		s.TraceContext = tracing.TraceContext
	}
	if err := p.reconcileRoute(st, cr.path, cr.rules, &s); err != nil {
		return nil, err
	}
	h, err := middleware.New(st.cache, middleware.From(s))
	if err != nil {
		return nil, err
	}
	return &route{path: cr.path, match: cr.match, enabled: cr.enabled, h: h, methods: s.Methods, counts: counts}, nil
}

// Wait waits for responses whose storing is being retried (see
// middleware.Handler.Wait), those of configurations a reload replaced included.
func (p *Proxy) Wait(ctx context.Context) error {
	if err := p.cur.Load().wait(ctx); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { p.retiring.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the reconcile worker and releases the store.
func (p *Proxy) Close() error {
	st := p.cur.Load()
	st.stopReconcile()
	st.store.release()
	return nil
}

// match returns the route for a path in route form (middleware.Canonical.Route):
// the longest matching prefix, whole segments.
func (st *state) match(route string) *route {
	for _, rt := range st.routes {
		if route == rt.match || strings.HasPrefix(route, rt.match) &&
			(strings.HasSuffix(rt.match, "/") || route[len(rt.match)] == '/') {
			return rt
		}
	}
	return st.def
}

// routeOf returns the route of r: the default one when its path is not
// canonical.
func (st *state) routeOf(r *http.Request) *route {
	_, route, err := middleware.CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		return st.def
	}
	return st.match(route)
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := p.acquire()
	defer st.release()
	info := st.fwd.inbound(r)
	r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
	if !st.guarded[strings.ToUpper(r.Method)] { // "post" is POST
		p.passUntracked(st, p.metrics.requests.Any(), w, r, st.rp)
		return
	}
	// Routes match the path as the core reads it (middleware.CanonicalPath):
	// decoded, without ;parameters, in any case. A path that cannot be read one
	// way only ("..", "..;", an encoded slash) could pick one route here and
	// reach another upstream (/internal/..;/charges): it is refused.
	_, route, err := middleware.CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		p.passUntracked(st, p.metrics.requests.Any(), w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st.def.h.WriteProblem(w, r, middleware.NonCanonicalPathProblem(r.URL.EscapedPath(), err), 0)
		}))
		return
	}
	rt := st.match(route)
	info.route = rt.name()
	if !rt.enabled || !rt.h.Tracked(r.Method) {
		p.passUntracked(st, rt.counts, w, r, st.rp)
		return
	}
	if err := rt.h.Handle(w, r, st.next); err != nil {
		// The upstream failed and the key was released (the request never left,
		// or the unknown_outcome policy is release): nothing was answered yet.
		p.upstreamProblem(w, r, rt.h, err)
	}
}

// name is the route as logs name it: its path, or "(top level)".
func (rt *route) name() string {
	if rt.path == "" {
		return "(top level)"
	}
	return rt.path
}

func (p *Proxy) observe(counts *prommetrics.RouteRequests, ev middleware.Event) {
	counts.Observe(ev)
	if p.tracing {
		tracing.Observe(ev)
	}
	r := ev.Request
	level := slog.LevelInfo
	if ev.Err != nil && ev.Outcome == middleware.OutcomeStoreError {
		level = slog.LevelError
	}
	if !p.log.Enabled(r.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("outcome", string(ev.Outcome)),
		slog.Int("status", ev.Status),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Float64("duration_ms", float64(ev.Duration.Microseconds())/1000),
	}
	if ev.KeyHash != "" {
		attrs = append(attrs, slog.String("key_hash", ev.KeyHash))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	p.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// upstreamTransport is the transport to the upstream; with tracing, each call is
// a client span and carries its traceparent upstream.
func upstreamTransport(cfg *Config) http.RoundTripper {
	t := newUpstreamTransport(cfg.Upstream, cfg.UpstreamTimeout) // h2c.go
	if !cfg.tracing {
		return t
	}
	return otelhttp.NewTransport(t)
}

// attempt is a first execution's upstream call (forward.Attempt: it sees whether
// the request was written, and guards it against a re-send), with the error
// ReverseProxy's error handler left for the core's classification.
type attempt struct {
	forward.Attempt
	err error
}

type attemptKey struct{}

func (p *Proxy) upstreamError(st *state, w http.ResponseWriter, r *http.Request, err error) {
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug // the client went away
	}
	p.log.LogAttrs(r.Context(), level, "upstream error", slog.String("path", r.URL.Path), slog.Any("error", err))
	if a, ok := r.Context().Value(attemptKey{}).(*attempt); ok {
		a.err = err // the core answers
		return
	}
	p.upstreamProblem(w, r, st.routeOf(r).h, err)
}

// upstreamProblem answers, in the route's error format, a failed upstream call
// whose key (if any) was released.
func (p *Proxy) upstreamProblem(w http.ResponseWriter, r *http.Request, h *middleware.Handler, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	h.WriteProblem(w, r, middleware.Problem{
		Type:      ProblemUpstream,
		Title:     "Upstream unavailable",
		Status:    status,
		Detail:    "the upstream could not be reached or did not answer; the request may be retried with the same key",
		Retryable: true, // it never left, or its key was released
	}, 0)
}
