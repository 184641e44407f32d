// Package proxy is idemproxy's standalone reverse proxy: httputil.ReverseProxy
// wrapped by the idempotency core, configured from flags, IDEMPROXY_* variables and
// an optional file, with an admin listener for health, metrics and key inspection.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
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
// and forwards first executions to the upstream.
type Proxy struct {
	cfg     *Config
	log     *slog.Logger
	store   cache.Store
	opened  *stores.Opened
	rp      *httputil.ReverseProxy
	next    middleware.Next
	def     *route
	routes  []*route        // longest path first
	guarded map[string]bool // methods tracked by some route, canonical: their paths must be canonical
	metrics *metrics
	rc      *reconciler // nil: no route reconciles (reconcile.go)
}

type route struct {
	methods []string
	path    string // as configured
	match   string // path in route form (middleware.Canonical.Route)
	enabled bool
	h       *middleware.Handler
}

// New builds the proxy and opens its store. An unreachable Redis is an error.
func New(ctx context.Context, cfg *Config, log *slog.Logger) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, log: log, metrics: newMetrics()}
	opened, err := cfg.Stores.Open(ctx, cfg.Store, stores.Env{Warn: log.Warn, Trace: cfg.tracing})
	if err != nil {
		return nil, cfg.storeError(err)
	}
	p.opened, p.store = opened, opened.Store
	p.metrics.memory(opened.Memory)
	target, _ := url.Parse(cfg.Upstream) // checked by Validate
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			// The core read the body into memory (GetBody is set only then).
			// ReverseProxy wraps the outbound body in a type the transport
			// does not know, so it would write the headers and the body
			// upstream apart: two writes, two wake-ups of the upstream. A
			// fresh reader over the same bytes goes out in one write.
			if pr.In.GetBody != nil && pr.Out.ContentLength > 0 {
				if b, err := pr.In.GetBody(); err == nil {
					pr.Out.Body = b
				}
			}
			if a, ok := pr.In.Context().Value(attemptKey{}).(*attempt); ok { // a first execution under the core
				pr.Out = a.Guard(pr.Out, pr.In.GetBody)
			}
		},
		Transport:    upstreamTransport(cfg),
		BufferPool:   forward.BufferPool{},
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	p.next = middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		// A failed upstream call is classified for the core rather than answered
		// here: upstreamError leaves it in the attempt.
		var a attempt
		defer p.metrics.upstream.Done(p.metrics.upstream.Start())
		p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attemptKey{}, &a)))
		return a.Classify(a.err)
	})
	if p.def, err = p.buildRoute("", true, cfg.Config); err != nil {
		p.Close()
		return nil, cfg.named(err, nil, 0)
	}
	for i, rc := range cfg.Routes {
		rt, err := p.buildRoute(rc.Path, rc.Enabled, cfg.route(rc))
		if err != nil {
			p.Close()
			return nil, cfg.named(err, &cfg.Routes[i], i)
		}
		p.routes = append(p.routes, rt)
	}
	p.guarded = map[string]bool{}
	for _, rt := range append([]*route{p.def}, p.routes...) {
		for _, m := range rt.methods {
			p.guarded[m] = true // upper case (Validate)
		}
	}
	sort.SliceStable(p.routes, func(i, j int) bool { return len(p.routes[i].match) > len(p.routes[j].match) })
	p.startReconcile()
	return p, nil
}

func (p *Proxy) buildRoute(path string, enabled bool, cc config.Config) (*route, error) {
	match := ""
	if path != "" {
		var err error
		if _, match, err = middleware.CanonicalPath(path); err != nil {
			return nil, err // Validate names the route
		}
	}
	s, err := cc.Compile()
	if err != nil {
		return nil, err
	}
	if s.Verifier != nil && !cc.IsSet("key_namespace") && match != "" {
		// A webhook route's keys are its own: two routes with the same
		// preset (two accounts of one provider) never share a record.
		s.KeyNamespace = match
	}
	s.Logger, s.Observer = p.log, p.observe
	if p.cfg.tracing {
		s.TraceContext = tracing.TraceContext
	}
	if err := p.reconcileRoute(path, cc, &s); err != nil {
		return nil, err
	}
	h, err := middleware.New(p.store, middleware.From(s))
	if err != nil {
		return nil, err
	}
	return &route{path: path, match: match, enabled: enabled, h: h, methods: s.Methods}, nil
}

// Wait waits for responses whose storing is being retried (see middleware.Handler.Wait).
func (p *Proxy) Wait(ctx context.Context) error {
	for _, rt := range append([]*route{p.def}, p.routes...) {
		if err := rt.h.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the reconcile worker and releases the store.
func (p *Proxy) Close() error {
	p.stopReconcile()
	return p.opened.Close()
}

// match returns the route for a path in route form (middleware.Canonical.Route):
// the longest matching prefix, whole segments.
func (p *Proxy) match(route string) *route {
	for _, rt := range p.routes {
		if route == rt.match || strings.HasPrefix(route, rt.match) &&
			(strings.HasSuffix(rt.match, "/") || route[len(rt.match)] == '/') {
			return rt
		}
	}
	return p.def
}

// routeOf returns the route of r: the default one when its path is not
// canonical.
func (p *Proxy) routeOf(r *http.Request) *route {
	_, route, err := middleware.CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		return p.def
	}
	return p.match(route)
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.guarded[strings.ToUpper(r.Method)] { // "post" is POST
		p.metrics.requests.Untracked()
		p.rp.ServeHTTP(w, r)
		return
	}
	// Routes match the path as the core reads it (middleware.CanonicalPath):
	// decoded, without ;parameters, in any case. A path that cannot be read one
	// way only ("..", "..;", an encoded slash) could pick one route here and
	// reach another upstream (/internal/..;/charges): it is refused.
	_, route, err := middleware.CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		p.metrics.requests.Untracked()
		p.def.h.WriteProblem(w, r, middleware.NonCanonicalPathProblem(r.URL.EscapedPath(), err), 0)
		return
	}
	rt := p.match(route)
	if !rt.enabled || !rt.h.Tracked(r.Method) {
		p.metrics.requests.Untracked()
		p.rp.ServeHTTP(w, r)
		return
	}
	if err := rt.h.Handle(w, r, p.next); err != nil {
		// The upstream failed and the key was released (the request never left,
		// or the unknown_outcome policy is release): nothing was answered yet.
		p.upstreamProblem(w, r, rt.h, err)
	}
}

func (p *Proxy) observe(ev middleware.Event) {
	p.metrics.requests.Observe(ev)
	if p.cfg.tracing {
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
	t := forward.NewTransport(cfg.UpstreamTimeout)
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

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug // the client went away
	}
	p.log.LogAttrs(r.Context(), level, "upstream error", slog.String("path", r.URL.Path), slog.Any("error", err))
	if a, ok := r.Context().Value(attemptKey{}).(*attempt); ok {
		a.err = err // the core answers
		return
	}
	p.upstreamProblem(w, r, p.routeOf(r).h, err)
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
