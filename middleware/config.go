package middleware

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// Config is the core's settings as every surface writes them. Caddy's JSON for the
// handler is this type; the Caddyfile, the proxy's flags, its IDEMPROXY_* variables,
// its config file and its routes all fill it. A nil field is unset: the default
// applies (or, in a proxy route, the top level's value). A set field wins, zero
// included. Go users may use it (New(store, cfg.Options()...)) or the With*
// options directly.
//
// Each field with a help tag is a setting: its json name is the Caddyfile
// subdirective and the config-file key, and, with dashes, the proxy's flag.
type Config struct {
	// Methods protected; others pass through untouched, key or not. Write them
	// in upper case; a request's method matches in any case ("post" is POST, and
	// is forwarded as POST). Default: POST, PATCH.
	Methods []string `json:"methods,omitzero" yaml:"methods,omitempty" help:"methods protected, upper case (requests match in any case)"`

	// KeyHeader is the request header carrying the key. Default: Idempotency-Key.
	KeyHeader *string `json:"key_header,omitempty" yaml:"key_header,omitempty" help:"request header carrying the key"`

	// RequireKey answers 400 to a protected request without a key, instead of
	// passing it through unprotected. Default: false.
	RequireKey *bool `json:"require_key,omitempty" yaml:"require_key,omitempty" help:"answer 400 to a protected request without a key instead of passing it through"`

	// ScopeHeaders are the request headers that, with the Host, scope a key, so
	// one client can never read another's stored response. That holds only when
	// the client's credential is in one of them. An entry "Cookie:NAME" names one
	// cookie. An empty list scopes by the Host alone. Default: Authorization.
	ScopeHeaders []string `json:"scope_headers,omitzero" yaml:"scope_headers,omitempty" help:"request headers that, with the Host, scope a key (Cookie:NAME for one cookie; empty: Host only)"`

	// ScopeHost makes the Host, in canonical form (lower case, no default port,
	// no trailing dot), part of a key's scope. Turn it off for an API served
	// under several names whose clients may retry through another. A webhook
	// route never scopes by the Host, which is not signed. Default: true.
	ScopeHost *bool `json:"scope_host,omitempty" yaml:"scope_host,omitempty" help:"scope keys by the Host (canonical form); webhook routes never do"`

	// KeyNamespace puts these keys in a namespace of their own: the same key in
	// two namespaces is two records. Keys from different key sources (a header,
	// a JSON field, a webhook preset's id) never meet, whatever the namespace.
	// Default: empty (a proxy route with a webhook preset: its path).
	KeyNamespace *string `json:"key_namespace,omitempty" yaml:"key_namespace,omitempty" help:"namespace of these keys: the same key in two namespaces is two records (default: none; a proxy webhook route: its path)"`

	// FingerprintHeaders are request headers added to the fingerprint (method,
	// path and query, body), which decides whether a repeat is the same request.
	// Default: none.
	FingerprintHeaders []string `json:"fingerprint_headers,omitzero" yaml:"fingerprint_headers,omitempty" help:"request headers added to the fingerprint (method, path, query and body)"`

	// MaxRequestBody is the largest request body accepted with a key; larger ones
	// get 413. Default: 10MiB.
	MaxRequestBody *Size `json:"max_request_body,omitempty" yaml:"max_request_body,omitempty" help:"largest request body accepted with a key (413 above)"`

	// MaxBody is the largest response body stored for replay. A larger response
	// is remembered as done; repeats get a not-replayable problem, never a second
	// execution. Default: 10MiB.
	MaxBody *Size `json:"max_body,omitempty" yaml:"max_body,omitempty" help:"largest response body stored for replay (above: remembered as done, not replayable)"`

	// StoreStatuses are the statuses stored for replay: codes, ranges
	// ("200-299"), classes ("2xx") and exclusions ("!404"). Others release the
	// key so a retry runs again. Default: 200-499, !408, !425, !429.
	StoreStatuses []string `json:"store_statuses,omitzero" yaml:"store_statuses,omitempty" help:"statuses stored for replay: codes, ranges (200-299), classes (2xx), !exclusions"`

	// BodyReadTimeout bounds the time a client has to send the body of a keyed
	// request, which the core buffers to fingerprint it; a slower client gets 400,
	// its connection is closed (HTTP/2: its stream ends), and it holds no buffer
	// longer. 0 means no bound. Default: 1m.
	BodyReadTimeout *Duration `json:"body_read_timeout,omitempty" yaml:"body_read_timeout,omitempty" help:"time a client has to send the body of a keyed request (buffered to fingerprint it); 0 = no bound"`

	// BodyBudget bounds the request-body bytes that tracked requests hold in
	// memory at once, shared by every handler of the process with the same
	// value (the proxy's routes; a Caddy config and the one that replaces it on
	// a reload). A declared Content-Length is reserved before the body is read,
	// an unknown length as it arrives; past the budget a request gets 503
	// overloaded with Retry-After, nothing claimed or forwarded. After a burst
	// the freed memory is returned to the operating system. At least
	// max_request_body. Default: 256MiB.
	BodyBudget *Size `json:"body_budget,omitempty" yaml:"body_budget,omitempty" help:"request-body bytes tracked requests may hold in memory at once, shared process-wide (503 overloaded past it); at least max_request_body"`

	// IgnoreHeaders are response headers never stored nor replayed. Default: none.
	IgnoreHeaders []string `json:"ignore_headers,omitzero" yaml:"ignore_headers,omitempty" help:"response headers never stored nor replayed"`

	// FailOpen passes requests through unprotected when the store fails, instead
	// of answering 503. Default: false.
	FailOpen *bool `json:"fail_open,omitempty" yaml:"fail_open,omitempty" help:"pass requests through unprotected when the store fails, instead of 503"`

	// TTL is how long a completed response is kept for replay. Default: 24h.
	TTL *Duration `json:"ttl,omitempty" yaml:"ttl,omitempty" help:"how long a completed response is kept for replay"`

	// LockTTL is the in-flight lease, renewed every third of it while the first
	// request runs; if its instance dies, the key can run again once it lapses.
	// At least 3ms. Default: 30s.
	LockTTL *Duration `json:"lock_ttl,omitempty" yaml:"lock_ttl,omitempty" help:"in-flight lease, renewed while the first request runs; a crashed instance's lock lapses after it"`

	// HandlerTimeout bounds a first execution, which does not stop when the
	// client hangs up (its response is stored for the retry). 0 means no bound.
	// Default: 5m.
	HandlerTimeout *Duration `json:"handler_timeout,omitempty" yaml:"handler_timeout,omitempty" help:"bound on a first execution (not cancelled when the client hangs up); 0 = no bound"`

	// StoreTimeout bounds each store call (claim, complete, release, lease
	// renewal). Default: 5s.
	StoreTimeout *Duration `json:"store_timeout,omitempty" yaml:"store_timeout,omitempty" help:"bound on each store call"`

	// CompleteRetry is how long a finished response whose storing fails (the
	// store unreachable) keeps being retried in the background, also after its
	// lease lapsed, as long as no other request claims the key. Default: 5m.
	CompleteRetry *Duration `json:"complete_retry,omitempty" yaml:"complete_retry,omitempty" help:"how long a finished response is retried into an unreachable store, also past its lease while nobody else claims the key"`

	// UnknownOutcome is what happens when a first execution was sent upstream and
	// no complete answer came back (a reset after the request was written, a
	// timeout, a body cut mid-stream): "hold" keeps the key as done with an
	// unknown outcome for unknown_hold, and every retry gets the same
	// outcome-unknown problem, nothing running twice, until an operator releases
	// it; "release" lets a retry run again. Default: hold.
	UnknownOutcome *string `json:"unknown_outcome,omitempty" yaml:"unknown_outcome,omitempty" help:"hold or release: a first execution sent with no complete answer holds its key (retries get the same outcome-unknown answer) or releases it"`

	// UnknownHold is how long an unknown outcome holds its key. Default: 24h.
	UnknownHold *Duration `json:"unknown_hold,omitempty" yaml:"unknown_hold,omitempty" help:"how long an unknown outcome holds its key"`

	// RetryAfter is the Retry-After sent with 409 (in flight) and 503 (store
	// unavailable, overloaded). Default: 1s.
	RetryAfter *Duration `json:"retry_after,omitempty" yaml:"retry_after,omitempty" help:"Retry-After sent with 409 (in flight) and 503 (store unavailable, overloaded)"`

	// Wait lets a duplicate that arrives while the first request runs wait up to
	// this long for its result, then replay it, instead of an immediate 409
	// (which it still gets on timeout). 0 means no waiting. Default: 0.
	Wait *Duration `json:"wait,omitempty" yaml:"wait,omitempty" help:"let a duplicate of an in-flight request wait this long for its result instead of an immediate 409; 0 = no waiting"`

	// WaitPoll is how often a waiting duplicate re-reads the store when no
	// notification arrives. Default: 250ms.
	WaitPoll *Duration `json:"wait_poll,omitempty" yaml:"wait_poll,omitempty" help:"how often a waiting duplicate re-reads the store when no notification comes"`

	// KeySource is where the key comes from: "auto" (key_header, or where the
	// webhook preset puts it), "header" (key_header), "json:<pointer>" (a string
	// in the JSON body at an RFC 6901 pointer, e.g. json:/data/idempotency_key),
	// "form:<field>" (a field of a form-encoded body) or "body" (a SHA-256 of the
	// body). A missing or non-string field is a missing key. Default: auto.
	KeySource *string `json:"key_source,omitempty" yaml:"key_source,omitempty" help:"where the key comes from: auto (key_header, or the webhook preset's key), header, json:/pointer, form:field, or body (a digest of it)"`

	// Webhook verifies a provider's signature before the key is claimed:
	// "standard" (Standard Webhooks: webhook-id, webhook-timestamp,
	// webhook-signature), "stripe" (Stripe-Signature), "github"
	// (X-Hub-Signature-256) or "hmac" (HMAC-SHA256 of the body in
	// webhook_header). A bad or missing signature gets 401; nothing is claimed,
	// stored or forwarded. Empty: no verification. Default: empty.
	Webhook *string `json:"webhook,omitempty" yaml:"webhook,omitempty" help:"verify a webhook signature before the key is claimed: standard, stripe, github or hmac; empty: none"`

	// WebhookSecrets are the webhook's signing secrets, as references:
	// "env:NAME" (a variable) or "file:PATH" (one secret per line). A signature
	// made with any of them verifies (rotation). Secrets themselves never go in
	// a configuration, and are never logged. Default: none.
	WebhookSecrets []string `json:"webhook_secrets,omitzero" yaml:"webhook_secrets,omitempty" help:"webhook signing secrets as env:NAME or file:PATH (one per line); several for rotation"`

	// WebhookTolerance is how far a signed timestamp (standard, stripe) may be
	// from now, either way. Default: 5m.
	WebhookTolerance *Duration `json:"webhook_tolerance,omitempty" yaml:"webhook_tolerance,omitempty" help:"how far a signed timestamp (standard, stripe) may be from now"`

	// WebhookHeader is the header carrying the signature, for the hmac preset.
	// Default: empty.
	WebhookHeader *string `json:"webhook_header,omitempty" yaml:"webhook_header,omitempty" help:"hmac preset: the header carrying the signature"`

	// WebhookEncoding is the signature's encoding for the hmac preset: hex or
	// base64. Default: hex.
	WebhookEncoding *string `json:"webhook_encoding,omitempty" yaml:"webhook_encoding,omitempty" help:"hmac preset: the signature's encoding, hex or base64"`

	// WebhookPrefix is text before the signature in its header for the hmac
	// preset, e.g. "sha256=". Default: empty.
	WebhookPrefix *string `json:"webhook_prefix,omitempty" yaml:"webhook_prefix,omitempty" help:"hmac preset: text before the signature in its header (e.g. sha256=)"`

	// ErrorFormat is the shape of the answers the core writes itself (409, 422,
	// 400, 503, …): "problem" (RFC 9457 application/problem+json), "stripe"
	// ({"error":{"type","code","message","doc_url"}} with Stripe-Should-Retry,
	// which Stripe's SDKs parse as a typed error), or a JSON template whose
	// strings hold {type}, {title}, {status}, {detail}, {code} or {retry_after}
	// ("{status}" alone becomes a number). Every such answer carries
	// Idempotency-Problem (its type), Cache-Control: no-store, and the request's
	// key. Default: problem.
	ErrorFormat *string `json:"error_format,omitempty" yaml:"error_format,omitempty" help:"shape of the answers the core writes itself: problem (RFC 9457), stripe, or a JSON template with {type} {title} {status} {detail} {code} {retry_after}"`

	// InFlightOnly deduplicates concurrent duplicates but stores no result: the
	// lock is released when the response is done, so a later retry runs again.
	// Default: false.
	InFlightOnly *bool `json:"in_flight_only,omitempty" yaml:"in_flight_only,omitempty" help:"deduplicate concurrent duplicates but store no result: a later retry runs again"`
}

// DefaultConfig returns the configuration with every field set to its default.
func DefaultConfig() Config {
	return Config{
		Methods:            append([]string(nil), DefaultMethods...),
		KeyHeader:          ptr(DefaultKeyHeader),
		RequireKey:         ptr(false),
		ScopeHeaders:       append([]string(nil), DefaultScopeHeaders...),
		ScopeHost:          ptr(true),
		KeyNamespace:       ptr(""),
		FingerprintHeaders: []string{},
		MaxRequestBody:     ptr(Size(DefaultMaxRequestBody)),
		MaxBody:            ptr(Size(DefaultMaxStoredBody)),
		StoreStatuses:      DefaultStoreStatusSpec(),
		BodyReadTimeout:    ptr(Duration(DefaultBodyReadTimeout)),
		BodyBudget:         ptr(Size(DefaultBodyBudget)),
		IgnoreHeaders:      []string{},
		FailOpen:           ptr(false),
		TTL:                ptr(Duration(DefaultTTL)),
		LockTTL:            ptr(Duration(DefaultLockTTL)),
		HandlerTimeout:     ptr(Duration(DefaultHandlerTimeout)),
		StoreTimeout:       ptr(Duration(DefaultStoreTimeout)),
		CompleteRetry:      ptr(Duration(DefaultCompleteRetry)),
		UnknownOutcome:     ptr(UnknownHold),
		UnknownHold:        ptr(Duration(DefaultUnknownHold)),
		RetryAfter:         ptr(Duration(DefaultRetryAfter)),
		Wait:               ptr(Duration(0)),
		WaitPoll:           ptr(Duration(DefaultWaitPoll)),
		InFlightOnly:       ptr(false),
		KeySource:          ptr(KeySourceAuto),
		ErrorFormat:        ptr(ErrorFormatProblem),
		Webhook:            ptr(""),
		WebhookSecrets:     []string{},
		WebhookTolerance:   ptr(Duration(DefaultWebhookTolerance)),
		WebhookHeader:      ptr(""),
		WebhookEncoding:    ptr("hex"),
		WebhookPrefix:      ptr(""),
	}
}

func ptr[T any](v T) *T { return &v }

// ConfigFields lists the settings of Config, in declaration order: every surface
// derives its flags, variables and subdirectives from it.
func ConfigFields() []conf.Field { return configFields }

var configFields = conf.Fields(reflect.TypeFor[Config]())

// Merged returns c with every field that is set in over replacing c's.
func (c Config) Merged(over Config) Config {
	conf.Merge(configFields, &c, &over)
	return c
}

// ConfigError is a configuration error that names the setting at fault by its
// config name (lock_ttl), so each surface can name it in its own terms.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Options returns the options that apply every set field of c. An unparsable
// value (store_statuses) is a *ConfigError.
func (c Config) Options() ([]Option, error) {
	var opts []Option
	if c.Methods != nil {
		opts = append(opts, WithMethods(c.Methods...))
	}
	if c.KeyHeader != nil {
		opts = append(opts, WithKeyHeader(*c.KeyHeader))
	}
	if c.RequireKey != nil {
		opts = append(opts, WithRequireKey(*c.RequireKey))
	}
	if c.ScopeHeaders != nil {
		opts = append(opts, WithScopeHeaders(c.ScopeHeaders...))
	}
	if c.ScopeHost != nil {
		opts = append(opts, WithScopeHost(*c.ScopeHost))
	}
	if c.KeyNamespace != nil {
		opts = append(opts, WithKeyNamespace(*c.KeyNamespace))
	}
	if c.FingerprintHeaders != nil {
		opts = append(opts, WithFingerprintHeaders(c.FingerprintHeaders...))
	}
	if c.MaxRequestBody != nil {
		opts = append(opts, WithMaxRequestBody(int64(*c.MaxRequestBody)))
	}
	if c.MaxBody != nil {
		opts = append(opts, WithMaxStoredBody(int64(*c.MaxBody)))
	}
	if c.StoreStatuses != nil {
		set, err := ParseStatuses(c.StoreStatuses...)
		if err != nil {
			return nil, &ConfigError{Field: "store_statuses", Err: err}
		}
		opts = append(opts, WithStoreStatuses(set))
	}
	if c.BodyReadTimeout != nil {
		opts = append(opts, WithBodyReadTimeout(c.BodyReadTimeout.Std()))
	}
	if c.BodyBudget != nil {
		opts = append(opts, WithBodyBudget(int64(*c.BodyBudget)))
	}
	if c.IgnoreHeaders != nil {
		opts = append(opts, WithIgnoredHeaders(c.IgnoreHeaders...))
	}
	if c.FailOpen != nil {
		opts = append(opts, WithFailOpen(*c.FailOpen))
	}
	if c.TTL != nil {
		opts = append(opts, WithTTL(c.TTL.Std()))
	}
	if c.LockTTL != nil {
		opts = append(opts, WithLockTTL(c.LockTTL.Std()))
	}
	if c.HandlerTimeout != nil {
		opts = append(opts, WithHandlerTimeout(c.HandlerTimeout.Std()))
	}
	if c.StoreTimeout != nil {
		opts = append(opts, WithStoreTimeout(c.StoreTimeout.Std()))
	}
	if c.CompleteRetry != nil {
		opts = append(opts, WithCompleteRetry(c.CompleteRetry.Std()))
	}
	if c.UnknownOutcome != nil {
		opts = append(opts, WithUnknownOutcome(*c.UnknownOutcome))
	}
	if c.UnknownHold != nil {
		opts = append(opts, WithUnknownHold(c.UnknownHold.Std()))
	}
	if c.RetryAfter != nil {
		opts = append(opts, WithRetryAfter(c.RetryAfter.Std()))
	}
	if c.Wait != nil {
		opts = append(opts, WithWait(c.Wait.Std()))
	}
	if c.WaitPoll != nil {
		opts = append(opts, WithWaitPoll(c.WaitPoll.Std()))
	}
	if c.InFlightOnly != nil {
		opts = append(opts, WithInFlightOnly(*c.InFlightOnly))
	}
	if c.KeySource != nil {
		opts = append(opts, WithKeySource(*c.KeySource))
	}
	if c.ErrorFormat != nil {
		opts = append(opts, WithErrorFormat(*c.ErrorFormat))
	}
	if c.Webhook != nil && *c.Webhook != "" {
		w, err := c.webhook()
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithWebhook(w))
	}
	return opts, nil
}

// webhook builds the Webhook of c, loading its secrets.
func (c Config) webhook() (Webhook, error) {
	w := Webhook{Preset: *c.Webhook, Tolerance: DefaultWebhookTolerance,
		Header: valueOr(c.WebhookHeader), Encoding: valueOr(c.WebhookEncoding), Prefix: valueOr(c.WebhookPrefix)}
	if c.WebhookTolerance != nil {
		if *c.WebhookTolerance <= 0 {
			return w, fieldErr("webhook_tolerance", "must be positive, got %v", *c.WebhookTolerance)
		}
		w.Tolerance = c.WebhookTolerance.Std()
	}
	secrets, err := LoadSecrets(c.WebhookSecrets)
	if err != nil {
		return w, err
	}
	w.Secrets = secrets
	return w, nil
}

// valueOr is *p, or "" when p is unset.
func valueOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Validate checks c as New would, without a store. Errors are *ConfigError.
func (c Config) Validate() error {
	opts, err := c.Options()
	if err != nil {
		return err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return cfg.finish()
}

// FieldOf returns the setting named in err, if err is a *ConfigError.
func FieldOf(err error) (string, bool) {
	var ce *ConfigError
	if errors.As(err, &ce) {
		return ce.Field, true
	}
	return "", false
}

// methodHint suggests the upper-case spelling of a lower-case method.
func methodHint(m string) string {
	if u := strings.ToUpper(m); u != m && validToken(m) {
		return fmt.Sprintf(" (write methods in upper case, %s; requests match it in any case)", u)
	}
	return ""
}
