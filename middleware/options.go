package middleware

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Defaults. Every one can be changed with the Option of the same name.
const (
	DefaultKeyHeader       = "Idempotency-Key"
	DefaultTTL             = 24 * time.Hour
	DefaultLockTTL         = 30 * time.Second
	DefaultMaxRequestBody  = 10 << 20 // 10 MiB
	DefaultMaxStoredBody   = 10 << 20 // 10 MiB
	DefaultHandlerTimeout  = 5 * time.Minute
	DefaultStoreTimeout    = 5 * time.Second
	DefaultRetryAfter      = time.Second
	DefaultWaitPoll        = 250 * time.Millisecond
	DefaultBodyReadTimeout = time.Minute
	DefaultCompleteRetry   = 5 * time.Minute
	DefaultUnknownHold     = 24 * time.Hour
)

// DefaultMethods are the tracked methods.
var DefaultMethods = []string{http.MethodPost, http.MethodPatch}

// DefaultScopeHeaders are the request headers that, with the Host, scope a key.
var DefaultScopeHeaders = []string{"Authorization"}

// Option configures a Handler.
type Option func(*config)

type config struct {
	methods         []string
	keyHeader       string
	requireKey      bool
	scopeHeaders    []string
	scopeFunc       func(*http.Request) string
	scopeHost       bool
	keyNamespace    string
	fpHeaders       []string
	fpFunc          func(r *http.Request, body []byte) string
	maxRequestBody  int64
	bodyTimeout     time.Duration
	bodyBudget      int64
	completeRetry   time.Duration
	unknownPolicy   string
	unknownHold     time.Duration
	maxStoredBody   int64
	ttl             time.Duration
	lockTTL         time.Duration
	storeStatuses   StatusSet
	ignoredHeaders  []string
	failOpen        bool
	handlerTimeout  time.Duration
	storeTimeout    time.Duration
	retryAfter      time.Duration
	wait            time.Duration
	waitPoll        time.Duration
	inFlightOnly    bool
	logger          *slog.Logger
	observer        func(Event)
	ignoredCanon    map[string]bool
	trackedByMethod map[string]bool
	scope           []scopePart // scopeHeaders, parsed
	keySourceSpec   string
	keySource       keySource // keySourceSpec, resolved
	keySourceID     string    // the key source (and webhook preset) as the store key names it
	legacyScope     bool      // store keys keep the first derivation (see writeScope)
	webhook         *Webhook
	verifier        *verifier // webhook, compiled
	bodyFirst       bool      // the body is read before the key: a signature or a key in it
	errorFormatSpec string
	errorFormat     errorFormat // errorFormatSpec, parsed
	traceContext    func(context.Context) []byte
}

// scopePart is one entry of the scope: a request header, or one cookie.
type scopePart struct {
	name   string
	cookie bool
}

// WithMethods sets the tracked HTTP methods; others pass through untouched.
// Default DefaultMethods (POST, PATCH).
func WithMethods(methods ...string) Option {
	return func(c *config) { c.methods = append([]string(nil), methods...) }
}

// WithKeyHeader sets the request header that carries the key. Default DefaultKeyHeader.
func WithKeyHeader(name string) Option { return func(c *config) { c.keyHeader = name } }

// WithRequireKey makes a tracked request without a key fail with 400 instead of
// passing through unprotected. Default false.
func WithRequireKey(require bool) Option { return func(c *config) { c.requireKey = require } }

// WithScopeHeaders sets the request headers that, with the Host, scope a key, so one
// client can never read another's response (which holds only when the client's
// credential is in one of them). "Cookie:NAME" names one cookie. Default
// DefaultScopeHeaders. With no names, the Host alone scopes keys.
func WithScopeHeaders(names ...string) Option {
	return func(c *config) { c.scopeHeaders = append([]string{}, names...) }
}

// WithScopeFunc replaces the Host-and-headers scope with a function of the request.
func WithScopeFunc(fn func(*http.Request) string) Option { return func(c *config) { c.scopeFunc = fn } }

// WithScopeHost sets whether the Host (in canonical form: lower-case, no default
// port, no trailing dot) is part of a key's scope. Turn it off for an API served
// under several names whose clients may retry through another. A webhook route
// never scopes by the Host, which is not signed. Default true.
func WithScopeHost(on bool) Option { return func(c *config) { c.scopeHost = on } }

// WithKeyNamespace puts this handler's keys in a namespace of their own: the
// same key under two namespaces is two records. Keys from different key sources
// (a header, a JSON field, a webhook preset's id) never meet whatever the
// namespace. Default "" (the proxy gives a webhook route its path).
func WithKeyNamespace(ns string) Option { return func(c *config) { c.keyNamespace = ns } }

// WithFingerprintHeaders adds request headers to the fingerprint (method, path and
// query, and body by default).
func WithFingerprintHeaders(names ...string) Option {
	return func(c *config) { c.fpHeaders = append([]string{}, names...) }
}

// WithFingerprintFunc replaces the fingerprint with a function of the request and
// its body. Equal results mean "the same request".
func WithFingerprintFunc(fn func(r *http.Request, body []byte) string) Option {
	return func(c *config) { c.fpFunc = fn }
}

// WithMaxRequestBody bounds the request body read for fingerprinting; a larger body
// gets 413. Default DefaultMaxRequestBody.
func WithMaxRequestBody(n int64) Option { return func(c *config) { c.maxRequestBody = n } }

// WithBodyReadTimeout bounds the time a client has to send the body of a keyed
// request, which the core buffers; a slower one gets 400 and its connection is
// closed (HTTP/1; on HTTP/2 its stream ends). It sets a read deadline on the
// connection (http.ResponseController) while the body is read; when the body
// was not read in full the deadline stays, so net/http's read of the rest after
// the answer ends there too. 0 means no bound. Default DefaultBodyReadTimeout.
func WithBodyReadTimeout(d time.Duration) Option { return func(c *config) { c.bodyTimeout = d } }

// WithCompleteRetry sets how long a finished response whose storing fails (the
// store unreachable) keeps being retried in the background, also after its lease
// lapsed, while no other request claims the key. Default DefaultCompleteRetry.
func WithCompleteRetry(d time.Duration) Option { return func(c *config) { c.completeRetry = d } }

// WithUnknownOutcome sets what happens when a first execution was sent and no
// complete answer came back (next returned an error wrapping ErrOutcomeUnknown,
// or panicked after it started answering): UnknownHold (the default) keeps the
// key done-with-unknown-outcome for WithUnknownHold, so retries get the same
// outcome-unknown problem and nothing runs twice; UnknownRelease releases the key
// so a retry runs again.
func WithUnknownOutcome(policy string) Option { return func(c *config) { c.unknownPolicy = policy } }

// WithUnknownHold sets how long an unknown outcome holds its key. Default
// DefaultUnknownHold.
func WithUnknownHold(d time.Duration) Option { return func(c *config) { c.unknownHold = d } }

// WithMaxStoredBody bounds the response body stored for replay. A larger response is
// still remembered as done; duplicates get a not-replayable problem instead of a
// second execution. Default DefaultMaxStoredBody.
func WithMaxStoredBody(n int64) Option { return func(c *config) { c.maxStoredBody = n } }

// WithTTL sets how long a completed record is kept. Default DefaultTTL.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithLockTTL sets the in-flight lease; it is renewed every third of it while the
// first request runs. Default DefaultLockTTL.
func WithLockTTL(d time.Duration) Option { return func(c *config) { c.lockTTL = d } }

// WithStoreStatuses sets which response statuses are stored. Default
// DefaultStoreStatuses (200–499 except 408, 425, 429).
func WithStoreStatuses(s StatusSet) Option { return func(c *config) { c.storeStatuses = s } }

// WithIgnoredHeaders names response headers that are never stored (nor replayed).
func WithIgnoredHeaders(names ...string) Option {
	return func(c *config) { c.ignoredHeaders = append([]string{}, names...) }
}

// WithFailOpen lets requests through unprotected when the store fails, instead of
// answering 503. Default false (fail closed).
func WithFailOpen(open bool) Option { return func(c *config) { c.failOpen = open } }

// WithHandlerTimeout bounds the first execution. Its context is detached from the
// client's, so a client that hangs up does not cancel it; this timeout does.
// 0 means no bound. Default DefaultHandlerTimeout.
func WithHandlerTimeout(d time.Duration) Option { return func(c *config) { c.handlerTimeout = d } }

// WithStoreTimeout bounds each store call (claim, complete, release, lease
// renewal). Default DefaultStoreTimeout.
func WithStoreTimeout(d time.Duration) Option { return func(c *config) { c.storeTimeout = d } }

// WithRetryAfter sets the Retry-After sent with 409 (in flight) and 503 (store
// unavailable, overloaded). Default DefaultRetryAfter.
func WithRetryAfter(d time.Duration) Option { return func(c *config) { c.retryAfter = d } }

// WithWait makes a duplicate that arrives while the first request is in flight wait
// up to d for it to complete and then get the replay, instead of an immediate 409.
// On timeout it gets the 409. If the first request's key is released (a 5xx, an
// error), one waiter claims the key and runs; the others keep waiting for it.
// Stores that implement cache.Notifier wake waiters at once; others are polled.
// Default 0 (no waiting).
func WithWait(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WithWaitPoll sets how often a waiting duplicate re-reads the store when no
// notification arrives (a lost pub/sub message costs at most this much latency).
// Default DefaultWaitPoll.
func WithWaitPoll(d time.Duration) Option { return func(c *config) { c.waitPoll = d } }

// WithInFlightOnly deduplicates concurrent duplicates but keeps no result: the lock
// is released when the response is done, so a later retry runs again. For endpoints
// whose responses must not be stored. Default false.
func WithInFlightOnly(on bool) Option { return func(c *config) { c.inFlightOnly = on } }

// WithLogger sets the logger. Logs never contain a raw key or Authorization value,
// only a short hash of the store key. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithTraceContext registers fn, called at each claim with the request's
// context: the bytes it returns (at most cache.MaxTrace; nil for none) are the
// first execution's trace context, kept with the lock and the stored response,
// and handed to the observer of every duplicate as Event.Origin, so a tracer can
// link the duplicate's span to the first's. The core knows nothing of any tracing
// library; package tracing (TraceContext, Observe) fits it to OpenTelemetry.
func WithTraceContext(fn func(context.Context) []byte) Option {
	return func(c *config) { c.traceContext = fn }
}

// WithObserver registers a callback called once per tracked request with its
// outcome; use it for metrics and access logs. It runs on the request's goroutine
// and must not block.
func WithObserver(fn func(Event)) Option { return func(c *config) { c.observer = fn } }

func defaultConfig() config {
	return config{
		methods:        DefaultMethods,
		keyHeader:      DefaultKeyHeader,
		scopeHeaders:   DefaultScopeHeaders,
		scopeHost:      true,
		maxRequestBody: DefaultMaxRequestBody,
		bodyTimeout:    DefaultBodyReadTimeout,
		bodyBudget:     DefaultBodyBudget,
		completeRetry:  DefaultCompleteRetry,
		unknownPolicy:  UnknownHold,
		unknownHold:    DefaultUnknownHold,
		maxStoredBody:  DefaultMaxStoredBody,
		ttl:            DefaultTTL,
		lockTTL:        DefaultLockTTL,
		storeStatuses:  DefaultStoreStatuses(),
		handlerTimeout: DefaultHandlerTimeout,
		storeTimeout:   DefaultStoreTimeout,
		retryAfter:     DefaultRetryAfter,
		waitPoll:       DefaultWaitPoll,
	}
}

func (c *config) finish() error {
	if len(c.methods) == 0 {
		return fieldErr("methods", "no tracked methods")
	}
	c.trackedByMethod = make(map[string]bool, len(c.methods))
	for _, m := range c.methods {
		if !validToken(m) || strings.ToUpper(m) != m {
			return fieldErr("methods", "%q is not an upper-case HTTP method token%s", m, methodHint(m))
		}
		c.trackedByMethod[m] = true
	}
	headers := []struct {
		field string
		names []string
	}{{"key_header", []string{c.keyHeader}}, {"fingerprint_headers", c.fpHeaders}, {"ignore_headers", c.ignoredHeaders}}
	for _, hs := range headers {
		for _, h := range hs.names {
			if !validToken(h) {
				return fieldErr(hs.field, "header name %q is not valid", h)
			}
		}
	}
	c.scope = c.scope[:0]
	for _, h := range c.scopeHeaders {
		if name, cookie, ok := strings.Cut(h, ":"); ok {
			if !strings.EqualFold(name, "Cookie") || !validToken(cookie) {
				return fieldErr("scope_headers", "%q: want a header name, or Cookie:NAME for one cookie", h)
			}
			c.scope = append(c.scope, scopePart{name: cookie, cookie: true})
		} else if !validToken(h) {
			return fieldErr("scope_headers", "header name %q is not valid", h)
		} else {
			c.scope = append(c.scope, scopePart{name: h})
		}
	}
	c.keyHeader = http.CanonicalHeaderKey(c.keyHeader)
	c.verifier = nil
	if c.webhook != nil {
		v, err := c.webhook.compile()
		if err != nil {
			return err
		}
		c.verifier = v
	}
	ks, err := resolveKeySource(c.keySourceSpec, c.keyHeader, c.webhook)
	if err != nil {
		return err
	}
	c.keySource = ks
	c.keySourceID = ks.id()
	if c.webhook != nil {
		c.keySourceID = c.webhook.Preset + "/" + c.keySourceID
	}
	c.legacyScope = c.verifier == nil && ks.kind == "header" && c.keyNamespace == "" && c.scopeHost
	c.bodyFirst = c.verifier != nil || ks.needsBody()
	if c.errorFormat, err = parseErrorFormat(c.errorFormatSpec); err != nil {
		return err
	}
	c.ignoredCanon = make(map[string]bool, len(c.ignoredHeaders))
	for _, h := range c.ignoredHeaders {
		c.ignoredCanon[http.CanonicalHeaderKey(h)] = true
	}
	switch {
	case c.ttl <= 0:
		return fieldErr("ttl", "must be positive, got %v", c.ttl)
	case c.lockTTL < 3*time.Millisecond:
		return fieldErr("lock_ttl", "must be at least 3ms, got %v", c.lockTTL)
	case c.maxRequestBody < 0:
		return fieldErr("max_request_body", "must not be negative, got %d", c.maxRequestBody)
	case c.bodyTimeout < 0:
		return fieldErr("body_read_timeout", "must not be negative, got %v", c.bodyTimeout)
	case c.bodyBudget <= 0:
		return fieldErr("body_budget", "must be positive (there is no unbounded setting), got %d", c.bodyBudget)
	case c.bodyBudget < c.maxRequestBody:
		return fieldErr("body_budget", "must be at least max_request_body (%d bytes), so that one request of that size fits; got %d", c.maxRequestBody, c.bodyBudget)
	case c.maxStoredBody < 0:
		return fieldErr("max_body", "must not be negative, got %d", c.maxStoredBody)
	case c.handlerTimeout < 0:
		return fieldErr("handler_timeout", "must not be negative, got %v", c.handlerTimeout)
	case c.unknownPolicy != UnknownHold && c.unknownPolicy != UnknownRelease:
		return fieldErr("unknown_outcome", "%q: want hold or release", c.unknownPolicy)
	case c.unknownHold <= 0:
		return fieldErr("unknown_hold", "must be positive, got %v", c.unknownHold)
	case c.completeRetry <= 0:
		return fieldErr("complete_retry", "must be positive, got %v", c.completeRetry)
	case c.storeTimeout <= 0:
		return fieldErr("store_timeout", "must be positive, got %v", c.storeTimeout)
	case c.retryAfter < 0:
		return fieldErr("retry_after", "must not be negative, got %v", c.retryAfter)
	case c.wait < 0:
		return fieldErr("wait", "must not be negative, got %v", c.wait)
	case c.waitPoll <= 0:
		return fieldErr("wait_poll", "must be positive, got %v", c.waitPoll)
	case c.wait > 0 && c.inFlightOnly:
		return fieldErr("wait", "does not combine with in_flight_only: with no stored result, a waiter would run the request again")
	case c.storeStatuses.Empty():
		return fieldErr("store_statuses", "no status is stored")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return nil
}

// validToken reports whether s is an RFC 9110 token (header names, methods).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
