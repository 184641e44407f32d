// Package caddymodule is the Caddy v2 handler module http.handlers.idempotency and
// its Caddyfile directive `idempotency`: a thin adapter from Caddy's configuration
// and handler chain to idemproxy's core (package middleware).
//
// Build a Caddy with it: see examples/caddy, or
// xcaddy build --with github.com/idemproxy/idemproxy/caddymodule
package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	caddy.RegisterModule(new(Handler))
	caddy.RegisterModule(new(MemoryStore))
	caddy.RegisterModule(new(RedisStore))
}

// ResultPlaceholder holds the outcome of the request (stored, replayed, conflict,
// mismatch, …; "executing" while the first request runs) for access logs and the
// header directive.
const ResultPlaceholder = "http.idempotency.result"

// Handler makes POST and PATCH requests that carry an Idempotency-Key run once:
// the first runs through the rest of the route, its response is stored, and every
// repeat gets the stored response (with Idempotent-Replayed: true) instead of a
// second execution. A repeat that arrives while the first is still running gets
// 409; a key reused for a different request gets 422.
type Handler struct {
	// The store that holds locks and responses, shared by every server using the
	// same one: "memory" (the default, this process only) or "redis" (shared by
	// every Caddy instance pointing at the same Redis).
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=http.handlers.idempotency.stores inline_key=type"`

	// How long a completed response is kept for replay. Default: 24h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// The in-flight lease: renewed every third of it while the request runs; if
	// this instance dies, the key can run again once it lapses. Default: 30s.
	LockTTL caddy.Duration `json:"lock_ttl,omitempty"`

	// The methods protected; others pass through. Default: POST, PATCH.
	Methods []string `json:"methods,omitempty"`

	// Answer 400 to a protected request without a key, instead of passing it
	// through unprotected. Default: false.
	RequireKey bool `json:"require_key,omitempty"`

	// The request header carrying the key. Default: Idempotency-Key.
	Header string `json:"header,omitempty"`

	// What a key belongs to, as placeholders, e.g.
	// ["{http.request.host}", "{http.request.header.Authorization}"]: one client
	// can never read another's stored response. Default: the Host and the
	// Authorization header.
	Scope []string `json:"scope,omitempty"`

	// Request headers added to the fingerprint (method, path, query and body),
	// which decides whether a repeat is the same request. Default: none.
	FingerprintHeaders []string `json:"fingerprint_headers,omitempty"`

	// Largest request body accepted with a key; larger ones get 413. Default: 10MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`

	// Largest response body stored for replay. A larger response is remembered as
	// done, and repeats get a not-replayable problem, never a second execution.
	// Default: 10MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// Statuses stored for replay: codes, ranges ("200-299"), classes ("2xx") and
	// exclusions ("!404"). Others release the key so a retry runs again.
	// Default: ["200-499", "!408", "!425", "!429"].
	StoreStatuses []string `json:"store_statuses,omitempty"`

	// Response headers never stored nor replayed. Default: none.
	IgnoreHeaders []string `json:"ignore_headers,omitempty"`

	// Pass requests through unprotected when the store fails, instead of 503.
	// Default: false.
	FailOpen bool `json:"fail_open,omitempty"`

	// Bound on a first execution, which does not stop when the client hangs up
	// (its response is stored for the retry). 0 uses the default: 5m.
	HandlerTimeout caddy.Duration `json:"handler_timeout,omitempty"`

	// Let a duplicate that arrives while the first request runs wait up to this
	// long for its result, then replay it, instead of an immediate 409 (which it
	// still gets on timeout). Default: 0 (no waiting).
	Wait caddy.Duration `json:"wait,omitempty"`

	// Deduplicate concurrent duplicates but store no result: the lock is released
	// when the response is done, so a later retry runs again. For responses that
	// must not be stored. Default: false.
	InFlightOnly bool `json:"in_flight_only,omitempty"`

	core *middleware.Handler
}

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

// Provision loads the store and builds the core.
func (h *Handler) Provision(ctx caddy.Context) error {
	if h.StoreRaw == nil {
		h.StoreRaw = json.RawMessage(`{"type":"memory"}`)
	}
	mod, err := ctx.LoadModule(h, "StoreRaw")
	if err != nil {
		return fmt.Errorf("loading idempotency store: %w", err)
	}
	store := mod.(StoreModule).IdempotencyStore()
	opts, err := h.options()
	if err != nil {
		return err
	}
	counter := outcomeCounter(ctx)
	logger := ctx.Slogger()
	opts = append(opts,
		middleware.WithLogger(logger),
		middleware.WithObserver(func(ev middleware.Event) {
			if repl, ok := ev.Request.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
				repl.Set(ResultPlaceholder, string(ev.Outcome))
			}
			if counter != nil {
				counter.WithLabelValues(string(ev.Outcome)).Inc()
			}
		}))
	if h.core, err = middleware.New(store, opts...); err != nil {
		return err
	}
	return nil
}

func (h *Handler) options() ([]middleware.Option, error) {
	var opts []middleware.Option
	if h.TTL != 0 {
		opts = append(opts, middleware.WithTTL(time.Duration(h.TTL)))
	}
	if h.LockTTL != 0 {
		opts = append(opts, middleware.WithLockTTL(time.Duration(h.LockTTL)))
	}
	if len(h.Methods) > 0 {
		methods := make([]string, len(h.Methods))
		for i, m := range h.Methods {
			methods[i] = strings.ToUpper(m)
		}
		opts = append(opts, middleware.WithMethods(methods...))
	}
	opts = append(opts, middleware.WithRequireKey(h.RequireKey), middleware.WithFailOpen(h.FailOpen))
	if h.Header != "" {
		opts = append(opts, middleware.WithKeyHeader(h.Header))
	}
	if len(h.Scope) > 0 {
		scope := append([]string(nil), h.Scope...)
		opts = append(opts, middleware.WithScopeFunc(func(r *http.Request) string {
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
		}))
	}
	if len(h.FingerprintHeaders) > 0 {
		opts = append(opts, middleware.WithFingerprintHeaders(h.FingerprintHeaders...))
	}
	if h.MaxRequestBody > 0 {
		opts = append(opts, middleware.WithMaxRequestBody(h.MaxRequestBody))
	}
	if h.MaxBody > 0 {
		opts = append(opts, middleware.WithMaxStoredBody(h.MaxBody))
	}
	if len(h.StoreStatuses) > 0 {
		set, err := middleware.ParseStatuses(h.StoreStatuses...)
		if err != nil {
			return nil, fmt.Errorf("store_statuses: %w", err)
		}
		opts = append(opts, middleware.WithStoreStatuses(set))
	}
	if len(h.IgnoreHeaders) > 0 {
		opts = append(opts, middleware.WithIgnoredHeaders(h.IgnoreHeaders...))
	}
	if h.HandlerTimeout != 0 {
		opts = append(opts, middleware.WithHandlerTimeout(time.Duration(h.HandlerTimeout)))
	}
	if h.Wait != 0 {
		opts = append(opts, middleware.WithWait(time.Duration(h.Wait)))
	}
	opts = append(opts, middleware.WithInFlightOnly(h.InFlightOnly))
	return opts, nil
}

// Validate checks the configuration; it changes nothing.
func (h *Handler) Validate() error {
	switch {
	case h.TTL < 0:
		return errors.New("idempotency: ttl must not be negative")
	case h.LockTTL < 0:
		return errors.New("idempotency: lock_ttl must not be negative")
	case h.MaxRequestBody < 0 || h.MaxBody < 0:
		return errors.New("idempotency: sizes must not be negative")
	case h.HandlerTimeout < 0:
		return errors.New("idempotency: handler_timeout must not be negative")
	case h.Wait < 0:
		return errors.New("idempotency: wait must not be negative")
	case h.Wait > 0 && h.InFlightOnly:
		return errors.New("idempotency: wait and in_flight_only do not combine (with no stored result a waiter would run again)")
	}
	if len(h.StoreStatuses) > 0 {
		if _, err := middleware.ParseStatuses(h.StoreStatuses...); err != nil {
			return fmt.Errorf("idempotency: store_statuses: %w", err)
		}
	}
	return nil
}

// ServeHTTP passes Caddy's next handler to the core. An error from next (e.g.
// reverse_proxy failing to reach its upstream) releases the key and is returned
// unchanged, so Caddy's error handling still applies.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.core.Tracked(r.Method) {
		if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			repl.Set(ResultPlaceholder, "executing")
		}
	}
	return h.core.Handle(w, r, next)
}

// outcomeCounter registers caddy_http_idempotency_requests_total in Caddy's
// metrics registry, or returns the one another handler of this config registered.
func outcomeCounter(ctx caddy.Context) *prometheus.CounterVec {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "http", Name: "idempotency_requests_total",
		Help: "Requests handled by the idempotency handler, by outcome.",
	}, []string{"outcome"})
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
		return nil
	}
	return c
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
