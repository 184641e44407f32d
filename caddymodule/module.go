// Package caddymodule is the Caddy v2 handler module http.handlers.idempotency and
// its Caddyfile directive `idempotency`: a thin adapter from Caddy's configuration
// and handler chain to idemproxy's core (package middleware).
//
// Build a Caddy with it: see examples/caddy, or
// xcaddy build --with github.com/idemproxy/idemproxy/caddymodule
package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/tracing"
)

func init() {
	caddy.RegisterModule(new(Handler))
	for _, k := range stores.Drivers {
		registerStore(k)
	}
}

// Handler makes POST and PATCH requests that carry an Idempotency-Key run once:
// the first runs through the rest of the route, its response is stored, and every
// repeat gets the stored response (with Idempotent-Replayed: true) instead of a
// second execution. A repeat that arrives while the first is still running gets
// 409; a key reused for a different request gets 422.
//
// Every JSON member is a documented field stating its default: the handler's
// own (tagged conf:"-": not settings of package config, UnmarshalJSON reads
// them) and, through the embedded config.Config and middleware.Settings, the
// core's.
type Handler struct {
	// The store that holds locks and responses, shared by every server using the
	// same one: "memory" (the default, this process only), or one shared by
	// every Caddy instance pointing at the same one ("redis", "postgres",
	// "dynamodb": the stores of internal/stores.Drivers, each a module Store).
	StoreRaw json.RawMessage `json:"store,omitempty" conf:"-" caddy:"namespace=http.handlers.idempotency.stores inline_key=type"`

	// What a key belongs to, as placeholders, e.g.
	// ["{http.request.host}", "{http.request.header.Authorization}"]. When set, it
	// replaces scope_headers. One client can never read another's stored response
	// only when the client's credential is part of the scope. Default: unset (the
	// Host and scope_headers).
	Scope []string `json:"scope,omitempty" conf:"-" caddy:"'scope <placeholders…>'" go:"'ScopeFunc'" default:"unset"`

	// Start with a store that does not answer: requests get 503
	// store-unavailable until it does. By default a store that does not
	// answer when it is opened fails provisioning, so Caddy does not start
	// and a reload (caddy reload, the admin API's /load) keeps the running
	// config, as idemproxy refuses it at start-up and on a reload. Only Redis
	// can start so; PostgreSQL and DynamoDB are checked (their table) when
	// opened, and the memory store always answers. Each handler's own
	// setting applies, whichever handler opened a store they share: a
	// handler without it checks a store that one with it opened, by opening
	// it again, and fails when it does not answer. A store that answered
	// when a handler without it opened (or checked) it is not checked
	// again, so a reload that keeps it is not refused for it. Default:
	// false.
	StartUnreachable bool `json:"start_unreachable,omitempty" conf:"-" caddy:"'start_unreachable'" default:"false"`

	// Names this handler in its metrics: the route label of
	// idemproxy_requests_total (the proxy's label, which names its route), so
	// that two idempotency blocks, in one site or in two, are told apart.
	// Handlers with the same name count together. It is also the name
	// Caddy's admin API (admin.api.idempotency) picks a handler, and so its
	// store, by: ?handler=NAME, the newest config's handler of that name
	// (needed when the handlers use more than one store; a handler without
	// a name is picked only when every handler uses one store). Default:
	// empty.
	Name string `json:"name,omitempty" conf:"-" caddy:"'name <name>'" default:"empty"`

	// The core's settings (methods, ttl, lock_ttl, …): package config's
	// Config, whose settings are this handler's JSON members and Caddyfile
	// subdirectives. The ones not set take their defaults.
	config.Config

	core      *middleware.Handler
	store     cache.Store                // for the admin API (registry)
	storeName string                     // the store's kind, where it is (redacted) and its identity's settings
	storeID   string                     // the store's identity: its key in the pool (internal/stores.Key)
	requests  *prommetrics.RouteRequests // nil when the config has no metrics registry
}

// UnmarshalJSON reads the handler's JSON: store, scope, and the core's settings
// by name.
func (h *Handler) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	if raw, ok := obj["store"]; ok {
		h.StoreRaw = raw
	}
	if raw, ok := obj["scope"]; ok {
		if err := json.Unmarshal(raw, &h.Scope); err != nil {
			return fmt.Errorf("scope: %w", err)
		}
	}
	if raw, ok := obj["name"]; ok {
		if err := json.Unmarshal(raw, &h.Name); err != nil {
			return fmt.Errorf("name: %w", err)
		}
	}
	if raw, ok := obj["start_unreachable"]; ok {
		if err := json.Unmarshal(raw, &h.StartUnreachable); err != nil {
			return fmt.Errorf("start_unreachable: %w", err)
		}
	}
	return h.Config.SetJSON(obj, func(name string) bool { return ownMembers[name] })
}

// MarshalJSON writes the handler's JSON: store, scope, and the core's settings
// that were set.
func (h Handler) MarshalJSON() ([]byte, error) {
	obj := h.Config.JSONObject()
	if h.StoreRaw != nil {
		obj["store"] = h.StoreRaw
	}
	if len(h.Scope) > 0 {
		obj["scope"] = h.Scope
	}
	if h.StartUnreachable {
		obj["start_unreachable"] = true
	}
	if h.Name != "" {
		obj["name"] = h.Name
	}
	return json.Marshal(obj)
}

// ownMembers are the handler's JSON members that are not the core's settings.
var ownMembers = map[string]bool{"handler": true, "store": true, "scope": true, "start_unreachable": true, "name": true}

// StoreModule is implemented by the store guest modules.
type StoreModule interface {
	IdempotencyStore() cache.Store
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision checks the settings, loads the store and builds the core. Pure checks
// come first, so a bad setting fails before any store is opened.
func (h *Handler) Provision(ctx caddy.Context) error {
	s, err := h.settings()
	if err != nil {
		return err
	}
	if h.StoreRaw == nil {
		h.StoreRaw = json.RawMessage(`{"type":"memory"}`)
	}
	// The store module learns start_unreachable from the context it is
	// provisioned with.
	sctx := ctx
	sctx.Context = context.WithValue(ctx.Context, startUnreachableKey{}, h.StartUnreachable)
	mod, err := sctx.LoadModule(h, "StoreRaw")
	if err != nil {
		return fmt.Errorf("loading idempotency store: %w", err)
	}
	store := mod.(StoreModule).IdempotencyStore()
	h.store = store
	h.storeID = fmt.Sprintf("%T@%p", store, store)
	if sm, ok := mod.(*Store); ok {
		h.storeName, h.storeID = sm.describe(), sm.key
	}
	if all := registerMetrics(ctx, store); all != nil {
		h.requests = all.Route(h.Name)
	}
	counts := h.requests
	s.Logger = moduleLogger(ctx)
	if h.Name != "" {
		// The name the admin API picks a handler by (?handler=, keys --handler).
		s.Logger = s.Logger.With("handler", h.Name)
	}
	// With Caddy's tracing directive on, its span is in the request's
	// context: the first execution's span context is kept with the claim,
	// and the outcome and the link to it go on that span. Off, both find
	// no span and do nothing.
	s.TraceContext = tracing.TraceContext
	s.Observer = func(ev middleware.Event) {
		if repl, ok := ev.Request.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			repl.Set(ResultPlaceholder, string(ev.Outcome))
			if ev.KeyHash != "" {
				repl.Set(KeyHashPlaceholder, ev.KeyHash)
			}
		}
		if counts != nil {
			counts.Observe(ev)
		}
		tracing.Observe(ev)
	}
	if h.core, err = middleware.New(store, middleware.From(s)); err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	registry.add(h)
	return nil
}

// compile compiles a handler's Config over the defaults into the core's
// settings. Provision calls it once per handler; a test counts its calls.
var compile = func(c config.Config) (middleware.Settings, error) {
	return config.Default().Merged(c).Compile()
}

// settings are the core's settings for this handler: the defaults with its
// Config's set settings, compiled, and the scope.
func (h *Handler) settings() (middleware.Settings, error) {
	s, err := compile(h.Config)
	if err != nil {
		return s, fmt.Errorf("idempotency: %w", err)
	}
	if h.Config.Reconcile.Request != "" {
		// It asks the upstream, which a handler in a Caddy route does not know.
		return s, errors.New("idempotency: reconcile is the standalone proxy's (idemproxy); in Caddy, settle held keys through Caddy's admin API (/idempotency/release, /idempotency/resolve)")
	}
	if len(h.Scope) > 0 {
		scope := append([]string(nil), h.Scope...)
		s.ScopeFunc = func(r *http.Request) string {
			repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			if repl == nil {
				repl = caddyhttp.NewTestReplacer(r)
			}
			var b strings.Builder
			for _, p := range scope {
				v := repl.ReplaceAll(p, "")
				fmt.Fprintf(&b, "%d:%s;", len(v), v) // length-prefixed: no ambiguity between parts
			}
			return b.String()
		}
	}
	return s, nil
}

// Validate checks the configuration; it changes nothing. Provision compiled
// and checked it already, so a provisioned handler has nothing left to check;
// an unprovisioned one is compiled to be checked.
func (h *Handler) Validate() error {
	if h.core != nil {
		return nil
	}
	_, err := h.settings()
	return err
}

// Cleanup waits, up to CleanupTimeout, for responses of this config whose storing
// is still being retried, so an old config's last completions land before its
// store may be closed.
func (h *Handler) Cleanup() error {
	if h.core == nil {
		return nil
	}
	registry.remove(h)
	ctx, cancel := context.WithTimeout(context.Background(), CleanupTimeout)
	defer cancel()
	if err := h.core.Wait(ctx); err != nil {
		return fmt.Errorf("idempotency: responses still being stored after %v: %w", CleanupTimeout, err)
	}
	return nil
}

// CleanupTimeout bounds Cleanup's wait for pending completions.
const CleanupTimeout = 10 * time.Second

// ServeHTTP passes Caddy's next handler to the core. An error from next (e.g.
// reverse_proxy failing to reach its upstream) releases the key and is returned
// unchanged, so Caddy's error handling still applies.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !h.core.Tracked(r.Method) {
		if repl != nil {
			repl.Set(ResultPlaceholder, "untracked")
		}
		if h.requests != nil {
			h.requests.Untracked()
		}
		return h.core.Handle(w, r, classified{next: next, h: h})
	}
	c := classified{next: next, guard: true, h: h}
	// Caddy's server sets its own Server header on every response before the
	// handlers run; reverse_proxy drops it from a proxied answer, so the
	// first execution's stored headers lack it. The core's own answers
	// (replays above all) go out without it, so a replay is the first
	// answer's headers exactly; next gets it back, to keep or drop as it does.
	if v, ok := w.Header()["Server"]; ok {
		c.server = v
		delete(w.Header(), "Server")
	}
	if repl != nil {
		r = withRequestLog(r, repl)
		repl.Set(ResultPlaceholder, resultExecuting)
		c.result = &resultWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, repl: repl}
		w = c.result
	}
	return h.core.Handle(w, r, c)
}

// classified tells the core how a failed reverse_proxy call ended, as the proxy
// does (forward.Attempt): an upstream error (reverse_proxy's DialError, or its
// 502/504) before the request's headers were written upstream never reached it
// (the key is released and Caddy's error handling answers); after, the outcome
// is unknown (held by default, answered by the core). Any other error is
// returned unchanged: the key is released.
//
// It also stops Go's transport from sending the request twice (seen: a reset on
// a reused connection after the upstream read the request was re-sent, and ran
// again).
type classified struct {
	next  caddyhttp.Handler
	guard bool // a tracked method: never let the transport re-send it
	h     *Handler
	// result is the writer under the core that sets the result placeholder
	// (nil without a replacer): it learns here how the core passed r on.
	result *resultWriter
	// server is Caddy's Server header, taken off for the core's own answers
	// and given back to next (ServeHTTP).
	server []string
}

func (c classified) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	if !c.guard {
		return c.next.ServeHTTP(w, r)
	}
	if c.server != nil && w.Header()["Server"] == nil {
		w.Header()["Server"] = c.server
	}
	if c.result != nil {
		c.h.passedOn(c.result, r)
		c.result.inNext = true
		defer func() { c.result.inNext = false }()
	}
	// reverse_proxy copies the request it sends upstream from r, context and
	// GetBody included: the attempt sees its writes and keeps Go's transport
	// from re-sending it once the upstream read it.
	var a forward.Attempt
	err := c.next.ServeHTTP(w, a.Guard(r, r.GetBody))
	if err == nil {
		return nil
	}
	var dial reverseproxy.DialError
	var he caddyhttp.HandlerError
	if errors.As(err, &dial) || errors.As(err, &he) && (he.StatusCode == http.StatusBadGateway || he.StatusCode == http.StatusGatewayTimeout) {
		return a.Classify(err)
	}
	return err
}

// requests is idemproxy_requests_total{outcome,route} (route: the proxy's
// label, the handler's name under Caddy) and the claim latency
// idemproxy_store_duration_seconds: the proxy's metrics (package prommetrics), so one
// dashboard and one alert file serve both. It lives as long as the process, so
// its counts survive config reloads: each config registers this same collector
// in its metrics registry (a new collector per config restarted the counts from
// zero at every reload).
var requests = prommetrics.NewRequests()

// registerMetrics registers requests in the config's metrics registry, with the
// memory store's gauges (idemproxy_memory_*) when store is the memory store: once
// per registry, the config's other handlers find them registered. It returns
// requests, or nil when the config has no registry or it refused them (logged).
func registerMetrics(ctx caddy.Context, store cache.Store) *prommetrics.Requests {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	if err := prommetrics.Register(reg, requests); err != nil {
		ctx.Slogger().Warn("idempotency: metrics not registered", "error", err)
		return nil
	}
	base, _ := cache.Unwrap(store)
	if mem, ok := base.(prommetrics.MemoryStats); ok {
		// Read at each scrape: there is one memory store per process.
		if err := prommetrics.Register(reg, prommetrics.NewMemory(mem)); err != nil {
			ctx.Slogger().Warn("idempotency: memory store metrics not registered", "error", err)
		}
	}
	if lc := prommetrics.NewLocalCache(base); lc != nil {
		// Several shared stores in one config would describe the same
		// metrics: the first registered is exported.
		if err := prommetrics.Register(reg, lc); err != nil {
			ctx.Slogger().Warn("idempotency: local cache metrics not registered", "error", err)
		}
	}
	return requests
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
