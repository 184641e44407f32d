// Package proxy is idemproxy's standalone reverse proxy: httputil.ReverseProxy
// wrapped by the idempotency core, configured from flags, IDEMPROXY_* variables and
// an optional file, with an admin listener for health, metrics and key inspection.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/middleware"
)

// ProblemUpstream is the problem type of a 502/504 when the upstream fails.
const ProblemUpstream = middleware.ProblemTypeBase + "upstream-unavailable"

// Proxy serves clients: it routes each request to its route's idempotency handler
// and forwards first executions to the upstream.
type Proxy struct {
	cfg     *Config
	log     *slog.Logger
	store   cache.Store
	closers []func() error
	rp      *httputil.ReverseProxy
	next    middleware.Next
	def     *route
	routes  []*route // longest path first
	metrics *metrics
}

type route struct {
	path    string
	enabled bool
	h       *middleware.Handler
}

// New builds the proxy and opens its store. An unreachable Redis is an error.
func New(ctx context.Context, cfg *Config, log *slog.Logger) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, log: log, metrics: newMetrics()}
	if err := p.openStore(ctx); err != nil {
		return nil, err
	}
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
		},
		Transport:    forward.NewTransport(time.Duration(cfg.UpstreamTimeout)),
		BufferPool:   forward.BufferPool{},
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	p.next = middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		p.metrics.upstreamInFlight.Add(1)
		start := time.Now()
		p.rp.ServeHTTP(w, r)
		p.metrics.upstream.observe(time.Since(start))
		p.metrics.upstreamInFlight.Add(-1)
		return nil
	})
	var err error
	if p.def, err = p.buildRoute(cfg.Route); err != nil {
		p.Close()
		return nil, err
	}
	for _, rc := range cfg.Routes {
		rt, err := p.buildRoute(cfg.resolved(rc))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("route %s: %w", rc.Path, err)
		}
		rt.path = rc.Path
		p.routes = append(p.routes, rt)
	}
	sort.SliceStable(p.routes, func(i, j int) bool { return len(p.routes[i].path) > len(p.routes[j].path) })
	return p, nil
}

func (p *Proxy) buildRoute(rc Route) (*route, error) {
	opts, err := rc.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, middleware.WithLogger(p.log), middleware.WithObserver(p.observe))
	h, err := middleware.New(p.store, opts...)
	if err != nil {
		return nil, err
	}
	return &route{path: rc.Path, enabled: *rc.Enabled, h: h}, nil
}

func (p *Proxy) openStore(ctx context.Context) error {
	if p.cfg.Store == "memory" {
		s, err := memstore.New(memstore.WithMaxRecords(p.cfg.MemoryMaxRecs), memstore.WithMaxBytes(int64(p.cfg.MemoryMaxBytes)))
		if err != nil {
			return err
		}
		p.store = s
		p.metrics.mem = s
		p.closers = append(p.closers, s.Close)
		return nil
	}
	client, err := redisstore.NewClient(p.cfg.Store)
	if err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	p.closers = append(p.closers, client.Close)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return fmt.Errorf("--store %s: Redis unreachable: %v", redisstore.Redact(p.cfg.Store), err)
	}
	rs := redisstore.New(client, redisstore.WithPrefix(p.cfg.RedisPrefix))
	p.closers = append(p.closers, rs.Close) // its pub/sub subscription, before the client
	p.store = rs
	return nil
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

// Close releases the store.
func (p *Proxy) Close() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// match returns the route for a path: the longest matching prefix, whole segments.
func (p *Proxy) match(path string) *route {
	for _, rt := range p.routes {
		if path == rt.path || strings.HasPrefix(path, rt.path) &&
			(strings.HasSuffix(rt.path, "/") || path[len(rt.path)] == '/') {
			return rt
		}
	}
	return p.def
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := p.match(r.URL.Path)
	if !rt.enabled || !rt.h.Tracked(r.Method) {
		p.metrics.untracked.Add(1)
		p.rp.ServeHTTP(w, r)
		return
	}
	_ = rt.h.Handle(w, r, p.next) // p.next never returns an error
}

func (p *Proxy) observe(ev middleware.Event) {
	p.metrics.record(ev)
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

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug // the client went away
	}
	p.log.LogAttrs(r.Context(), level, "upstream error", slog.String("path", r.URL.Path), slog.Any("error", err))
	middleware.WriteProblem(w, middleware.Problem{
		Type:   ProblemUpstream,
		Title:  "Upstream unavailable",
		Status: status,
		Detail: "the upstream could not be reached or did not answer; the request may be retried with the same key",
	}, 0)
}
