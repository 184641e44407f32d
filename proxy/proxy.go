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

	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/tracing"
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
	s.RequestInfo = requestInfo
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
	if !st.tracked[strings.ToUpper(r.Method)] { // "post" is POST
		p.passUntracked(st, p.metrics.requests.Any(), w, r, st.rp)
		return
	}
	// The request is read into its canonical form once, here: routes match
	// the path as the core reads it (decoded, without ;parameters, in any
	// case), and the core takes the same reading (HandleCanonical). A path
	// that cannot be read one way only ("..", "..;", an encoded slash) could
	// pick one route here and reach another upstream (/internal/..;/charges):
	// it is refused.
	c, err := middleware.Canonicalize(r)
	if errors.Is(err, middleware.ErrNonCanonicalPath) {
		p.passUntracked(st, p.metrics.requests.Any(), w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st.def.h.WriteProblem(w, r, middleware.NonCanonicalPathProblem(r.URL.EscapedPath(), err), 0)
		}))
		return
	}
	rt := st.match(c.Route)
	info.route = rt.name()
	if !rt.enabled || !rt.h.Tracked(r.Method) {
		p.passUntracked(st, rt.counts, w, r, st.rp)
		return
	}
	if err != nil { // a Host with no canonical form: the core answers it
		err = rt.h.Handle(w, r, st.next)
	} else {
		err = rt.h.HandleCanonical(w, r, c, st.next)
	}
	if err != nil {
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
