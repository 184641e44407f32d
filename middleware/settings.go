package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Settings are the core's settings. Each tagged field is a setting of every
// surface: its json name is the proxy's config-file key (and, with dashes, its
// flag), a Caddyfile subdirective and a key of Caddy's JSON (package config
// derives them all from these tags). Go users change them with an Option:
//
//	middleware.New(store, func(s *middleware.Settings) {
//		s.TTL = 48 * time.Hour
//		s.RequireKey = true
//	})
//
// DefaultSettings holds every default; New checks the result.
type Settings struct {
	// Methods protected; others pass through untouched, key or not. Write
	// them in upper case; a request's method matches in any case ("post" is
	// POST, and goes on as POST).
	Methods []string `json:"methods" help:"methods protected, upper case (requests match in any case)"`

	// KeyHeader is the request header carrying the key.
	KeyHeader string `json:"key_header" help:"request header carrying the key"`

	// RequireKey answers 400 to a protected request without a key, instead of
	// passing it through unprotected.
	RequireKey bool `json:"require_key" help:"answer 400 to a protected request without a key instead of passing it through"`

	// MinKeyLength is the shortest key accepted, in characters, from any key
	// source; a shorter one is answered 400 invalid-key and nothing runs. Keys
	// the client makes up ("1", "retry") collide across its own operations;
	// a length a random UUID has (36) refuses them. 1 accepts any.
	MinKeyLength int `json:"min_key_length" help:"shortest key accepted, in characters (400 invalid-key below); 1 accepts any"`

	// ScopeHeaders are the request headers that, with the Host, scope a key,
	// so one client can never read another's stored response. That holds only
	// when the client's credential is in one of them. "Cookie:NAME" names one
	// cookie. An empty list scopes by the Host alone.
	ScopeHeaders []string `json:"scope_headers" help:"request headers that, with the Host, scope a key (Cookie:NAME for one cookie; empty: Host only)"`

	// ScopeHost makes the Host, in canonical form (lower case, no default
	// port, no trailing dot), part of a key's scope. Turn it off for an API
	// served under several names whose clients may retry through another. A
	// route with a Verifier never scopes by the Host, which is not signed.
	ScopeHost bool `json:"scope_host" help:"scope keys by the Host (canonical form); webhook routes never do"`

	// KeyNamespace puts these keys in a namespace of their own: the same key
	// in two namespaces is two records. Keys from different key sources (a
	// header, a JSON field, a webhook preset's id) never meet, whatever the
	// namespace. The proxy gives a webhook route without one its path.
	KeyNamespace string `json:"key_namespace" help:"namespace of these keys: the same key in two namespaces is two records (a proxy webhook route without one: its path)"`

	// FingerprintHeaders are request headers added to the fingerprint
	// (method, path and query, body), which decides whether a repeat is the
	// same request.
	FingerprintHeaders []string `json:"fingerprint_headers" help:"request headers added to the fingerprint (method, path, query and body)"`

	// MaxRequestBody is the largest request body accepted with a key; a
	// larger one gets 413.
	MaxRequestBody int64 `json:"max_request_body" unit:"bytes" help:"largest request body accepted with a key (413 above)"`

	// BodyBudget bounds the request-body bytes that tracked requests hold in
	// memory at once (the core buffers a body to fingerprint it), across
	// every Handler of the process built with the same value: the proxy's
	// routes share one budget, and so do a Caddy config's handlers and those
	// of the config that replaces it on a reload. A declared Content-Length
	// is reserved before a byte is read, an unknown length as it arrives; all
	// of it is returned when the request is done. A request that does not fit
	// gets 503 overloaded with Retry-After, nothing claimed or forwarded. At
	// least MaxRequestBody. When the bodies held fall back to none after a
	// quarter of the budget or more was in use, the freed memory is returned
	// to the operating system (debug.FreeOSMemory, at most once a minute).
	// A replay holds its stored body's size (at most the whole budget) until
	// the client took it; one that does not fit gets the same 503.
	BodyBudget int64 `json:"body_budget" unit:"bytes" help:"request bodies being read and stored bodies being replayed that tracked requests hold in memory at once, shared by the process's handlers with the same value; past it 503 overloaded"`

	// MaxBody is the largest response body stored for replay. A larger
	// response is remembered as done; repeats get a not-replayable problem,
	// never a second execution.
	MaxBody int64 `json:"max_body" unit:"bytes" help:"largest response body stored for replay (above: remembered as done, not replayable)"`

	// StoreStatuses are the statuses stored for replay: codes, ranges
	// ("200-299"), classes ("2xx") and exclusions ("!404"). Others release
	// the key so a retry runs again.
	StoreStatuses StatusSet `json:"store_statuses" help:"statuses stored for replay: codes, ranges (200-299), classes (2xx), !exclusions"`

	// BodyReadTimeout bounds the time a client has to send the body of a
	// keyed request, which the core buffers; a slower one gets 400 and its
	// connection is closed (HTTP/2: the stream ends). It also bounds how long
	// an answer (a replay, or a first execution's) waits for the client to
	// take each 64 KiB; a client that stalls longer has its connection
	// closed, and a first execution's answer is still stored in full. 0 means
	// no bound.
	BodyReadTimeout time.Duration `json:"body_read_timeout" help:"time a client has to send the body of a keyed request (buffered to fingerprint it), and to take each 64 KiB of an answer; 0 = no bound"`

	// IgnoreHeaders are response headers never stored nor replayed.
	IgnoreHeaders []string `json:"ignore_headers" help:"response headers never stored nor replayed"`

	// FailOpen passes requests through unprotected when the store fails,
	// instead of answering 503. A full store is never failed open.
	FailOpen bool `json:"fail_open" help:"pass requests through unprotected when the store fails, instead of 503"`

	// TTL is how long a completed response is kept for replay.
	TTL time.Duration `json:"ttl" help:"how long a completed response is kept for replay"`

	// LockTTL is the in-flight lease, renewed every third of it while the
	// first request runs and while its answer is stored; if its instance
	// dies, the lease lapses and the key is held as an unknown outcome
	// (UnknownOutcome). At least 3ms.
	LockTTL time.Duration `json:"lock_ttl" help:"in-flight lease, renewed while the first request runs and its answer is stored; once a crashed instance's lease lapses its key is held as an unknown outcome"`

	// HandlerTimeout bounds a first execution, which does not stop when the
	// client hangs up (its response is stored for the retry). When it passes,
	// the outcome is unknown: the key is held with 504, whatever the handler
	// does after. 0 means no bound.
	HandlerTimeout time.Duration `json:"handler_timeout" help:"bound on a first execution (not cancelled when the client hangs up); when it passes the key is held with 504 (an unknown outcome); 0 = no bound"`

	// StoreTimeout bounds each store call (claim, complete, release, lease
	// renewal). A store that bounds each of its requests itself
	// (cache.RequestBounded: DynamoDB, by this timeout) gets no overall bound
	// on Complete, which may write a large response in many requests.
	StoreTimeout time.Duration `json:"store_timeout" help:"bound on each store call (on DynamoDB, on each of its requests: a large response's completion takes as many as it needs)"`

	// CompleteRetry is how long a finished response whose storing fails (the
	// store unreachable) keeps being retried in the background, also after
	// its lease lapsed, as long as no other request claims the key.
	CompleteRetry time.Duration `json:"complete_retry" help:"how long a finished response is retried into an unreachable store, also past its lease while nobody else claims the key"`

	// UnknownOutcome is what happens when a first execution was sent upstream
	// and no complete answer came back (a reset after the request was
	// written, a timeout, a body cut mid-stream, handler_timeout), or its
	// lease lapsed (its instance died): UnknownHold keeps the key as done
	// with an unknown outcome for UnknownHold, and every retry gets the same
	// outcome-unknown problem, nothing running twice, until reconcile or an
	// operator settles it; UnknownRelease lets a retry run again.
	UnknownOutcome string `json:"unknown_outcome" help:"hold or release: a first execution sent with no complete answer, or whose lease lapsed, holds its key (retries get the same outcome-unknown answer) or releases it"`

	// UnknownHold is how long an unknown outcome holds its key (a lapsed
	// lease's, from the lease's end).
	UnknownHold time.Duration `json:"unknown_hold" help:"how long an unknown outcome holds its key (a lapsed lease: from the lease's end)"`

	// RetryAfter is the Retry-After sent with 409 (in flight) and 503 (store
	// unavailable, overloaded).
	RetryAfter time.Duration `json:"retry_after" help:"Retry-After sent with 409 (in flight) and 503 (store unavailable)"`

	// Wait lets a duplicate that arrives while the first request runs wait up
	// to this long for its result, then replay it, instead of an immediate
	// 409 (which it still gets on timeout). If the first request's key is
	// released (a 5xx, an error), one waiter claims the key and runs. Stores
	// that implement cache.Notifier wake waiters at once; others are polled.
	// 0 means no waiting.
	Wait time.Duration `json:"wait" help:"let a duplicate of an in-flight request wait this long for its result instead of an immediate 409; 0 = no waiting"`

	// WaitPoll is how often a waiting duplicate re-reads the store when no
	// notification arrives.
	WaitPoll time.Duration `json:"wait_poll" help:"how often a waiting duplicate re-reads the store when no notification comes"`

	// InFlightOnly deduplicates concurrent duplicates but stores no result:
	// the lock is released when the response is done, so a later retry runs
	// again.
	InFlightOnly bool `json:"in_flight_only" help:"deduplicate concurrent duplicates but store no result: a later retry runs again"`

	// KeySource finds the key; nil means HeaderKey{KeyHeader}. Package
	// keysource has the others (and config builds them from key_source).
	KeySource KeySource `json:"-"`

	// Verifier authenticates a request before its key is claimed (package
	// webhook); nil: none.
	Verifier Verifier `json:"-"`

	// ErrorFormat renders the answers the core writes itself; nil means
	// ProblemJSON. Package errformat has Stripe's shape and JSON templates.
	ErrorFormat ErrorFormat `json:"-"`

	// ScopeFunc, when set, replaces the Host-and-headers scope with a
	// function of the request (Caddy's scope placeholders).
	ScopeFunc func(*http.Request) string `json:"-"`

	// FingerprintFunc, when set, replaces the fingerprint with a function of
	// the request and its body: equal results mean "the same request".
	FingerprintFunc func(r *http.Request, body []byte) string `json:"-"`

	// BodyFingerprint reads the body for the fingerprint as its clients mean
	// it (package fingerprint: JSON, form, multipart; config builds it from
	// fingerprint and fingerprint_ignore), so a retry serialised anew
	// replays, and a 422 names the part that differs. nil: the body's bytes.
	// Not with a Verifier (a signed webhook's body is left out) nor with
	// FingerprintFunc.
	BodyFingerprint BodyFingerprint `json:"-"`

	// Logger receives the core's log lines; they never contain a raw key or
	// Authorization value, only a short hash of the store key. nil means
	// slog.Default().
	Logger *slog.Logger `json:"-"`

	// Observer is called once per tracked request with its outcome, for
	// metrics and access logs. It runs on the request's goroutine and must not
	// block.
	Observer func(Event) `json:"-"`

	// TraceContext is called at each claim with the request's context: the
	// bytes it returns (at most cache.MaxTrace; nil for none) are the first
	// execution's trace context, kept with the lock and the stored response,
	// and handed to the observer of every duplicate as Event.Origin, so a
	// tracer can link the duplicate's span to the first's. Package tracing
	// fits it to OpenTelemetry.
	TraceContext func(context.Context) []byte `json:"-"`

	// OnHold, when set, is called when a first execution's key is about to
	// be held as an unknown outcome (unknown_outcome hold), before the hold
	// is stored, with what the request carried (Held): the proxy's reconcile
	// schedules a request that asks the upstream what became of it. It runs
	// on the request's goroutine and must bound its own work; an error is
	// logged, and the key is held all the same.
	OnHold func(context.Context, Held) error `json:"-"`
}

// Unknown-outcome policies: Settings.UnknownOutcome.
const (
	UnknownHold    = "hold"
	UnknownRelease = "release"
)

// Option changes the Settings New starts from (DefaultSettings).
type Option func(*Settings)

// From is the Option that replaces the settings with s (compiled settings, as
// package config's Compile returns them).
func From(s Settings) Option { return func(d *Settings) { *d = s } }

// DefaultSettings returns every setting's default: the one defaults table of
// every surface.
func DefaultSettings() Settings {
	return Settings{
		Methods:         []string{http.MethodPost, http.MethodPatch},
		KeyHeader:       "Idempotency-Key",
		MinKeyLength:    1,
		ScopeHeaders:    []string{"Authorization"},
		ScopeHost:       true,
		MaxRequestBody:  10 << 20,
		BodyBudget:      256 << 20,
		MaxBody:         10 << 20,
		StoreStatuses:   DefaultStoreStatuses(),
		BodyReadTimeout: time.Minute,
		TTL:             24 * time.Hour,
		LockTTL:         30 * time.Second,
		HandlerTimeout:  5 * time.Minute,
		StoreTimeout:    5 * time.Second,
		CompleteRetry:   5 * time.Minute,
		UnknownOutcome:  UnknownHold,
		UnknownHold:     24 * time.Hour,
		RetryAfter:      time.Second,
		WaitPoll:        250 * time.Millisecond,
	}
}

// SettingsError is a settings error that names the setting at fault by its
// json name (lock_ttl), so each surface can name it in its own terms. It is the
// one error type of a bad setting, the core's and its plug-ins' (key sources,
// webhooks, error formats, reconcile) alike.
type SettingsError struct {
	Field string
	Err   error
}

func (e *SettingsError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *SettingsError) Unwrap() error { return e.Err }

// SettingsErrorf returns a *SettingsError naming field, its text formatted as
// by fmt.Errorf.
func SettingsErrorf(field, format string, args ...any) error {
	return &SettingsError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Check reports the first setting that New would refuse, as a *SettingsError.
// It is the one place each rule is checked.
func (s *Settings) Check() error {
	_, err := compile(s)
	return err
}
