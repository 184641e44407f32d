package middleware

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Settings are the core's settings. Each tagged field is a setting of every
// surface: its json name is the proxy's config-file key (and, with dashes, its
// flag), a Caddyfile subdirective and a key of Caddy's JSON (package config
// derives them all from these tags), and its doc comment is its
// documentation, ending with its default: the one text that go doc, --help
// and the settings table (docs/settings.md) show, go generate
// ./test/settingsdoc writing the last two from it. The other fields
// (json:"-") are Go's only. Go users change them
// with an Option:
//
//	middleware.New(store, func(s *middleware.Settings) {
//		s.TTL = 48 * time.Hour
//		s.RequireKey = true
//	})
//
// DefaultSettings holds every default; New checks the result.
type Settings struct {
	// Methods tracked, written in upper case ('post' is an error); a request's
	// method matches in any case, and others pass through untouched, key or not.
	//
	// Default: POST, PATCH.
	Methods []string `json:"methods"`

	// Request header carrying the key.
	//
	// Default: Idempotency-Key.
	KeyHeader string `json:"key_header"`

	// Answer '400' to a tracked request without a key, instead of passing it
	// through untracked.
	//
	// Default: false.
	RequireKey bool `json:"require_key"`

	// Shortest key accepted, in characters, from any key source: a shorter one
	// gets '400' 'invalid-key' and nothing runs (36, a UUID's length, refuses
	// made-up keys such as '1', which collide across a client's own operations);
	// 1 to 255.
	//
	// Default: 1.
	MinKeyLength int `json:"min_key_length"`

	// Request headers that, with the Host, scope a key, so that one client never
	// reads another's stored response (which holds only when the client's
	// credential is in one of them); 'Cookie:NAME' names one cookie; empty: the
	// Host only.
	//
	// Default: Authorization.
	ScopeHeaders []string `json:"scope_headers"`

	// Scope keys by the Host, in canonical form (lower case, no default port, no
	// trailing dot); off for an API served under several names whose clients may
	// retry through another. A webhook route never does: its Host is not signed.
	//
	// Default: true.
	ScopeHost bool `json:"scope_host"`

	// Namespace of these keys: the same key in two namespaces is two records;
	// keys from different key sources never meet; a proxy webhook route without
	// one gets its path.
	//
	// Default: none.
	KeyNamespace string `json:"key_namespace"`

	// Request headers added to the fingerprint (method, path and query, body),
	// which decides whether a repeat is the same request.
	//
	// Default: none.
	FingerprintHeaders []string `json:"fingerprint_headers"`

	// Largest request body accepted with a key ('413' above).
	//
	// Default: 10MiB.
	MaxRequestBody int64 `json:"max_request_body" unit:"bytes"`

	// Request-body bytes tracked requests hold in memory at once (and stored
	// bodies being replayed: a replay holds its body's size until the client
	// took it), shared by every handler of the process with the same value (the
	// proxy's routes; a Caddy config's handlers, and those of the config that
	// replaces it on a reload). A declared Content-Length is reserved before the
	// body is read, an unknown length as it arrives; past it '503' 'overloaded'
	// with Retry-After, nothing claimed, forwarded or replayed. When the bodies
	// held fall back to none after a quarter of it or more was in use, the
	// memory is returned to the operating system, at most once a minute. At
	// least max_request_body; there is no unbounded setting.
	//
	// Default: 256MiB.
	BodyBudget int64 `json:"body_budget" unit:"bytes"`

	// Largest response body stored for replay; a larger response is remembered
	// as done, and repeats get a not-replayable problem, never a second
	// execution.
	//
	// Default: 10MiB.
	MaxBody int64 `json:"max_body" unit:"bytes"`

	// Statuses stored for replay: codes, ranges ('200-299'), classes ('2xx') and
	// exclusions ('!404'); the others release the key, so that a retry runs
	// again.
	//
	// Default: 200-499, !408, !425, !429.
	StoreStatuses StatusSet `json:"store_statuses" go:"'StoreStatuses' ('ParseStatuses(…)')"`

	// Time a client has to send the body of a keyed request, which is buffered;
	// then '400' and the connection is closed (HTTP/2: the stream ends). Also
	// the time a client has to take each 64 KiB of an answer (a replay, or a
	// first execution's, which is still stored in full); then its connection is
	// closed. '0': none.
	//
	// Default: 1m.
	BodyReadTimeout time.Duration `json:"body_read_timeout"`

	// Response headers never stored nor replayed.
	//
	// Default: none.
	IgnoreHeaders []string `json:"ignore_headers"`

	// On store failure, pass requests through untracked instead of '503' (never
	// when the memory store is full).
	//
	// Default: false.
	FailOpen bool `json:"fail_open"`

	// How long a completed response is kept for replay.
	//
	// Default: 24h.
	TTL time.Duration `json:"ttl"`

	// How long a first execution's claim on its key lasts, renewed every
	// third of it while it runs and while its answer is stored; once the claim
	// of an instance that died lapses, its key is held as an unknown outcome (unknown_outcome; see
	// docs/unknown-outcomes.md). At least 3ms.
	//
	// Default: 30s.
	ClaimTTL time.Duration `json:"lock_ttl"`

	// Bound on a first execution, which does not stop when the client hangs up
	// (its response is stored for the retry); when it passes, the key is held
	// with '504' (an unknown outcome), whatever the handler does after; '0'
	// means no bound, on every surface.
	//
	// Default: 5m.
	HandlerTimeout time.Duration `json:"handler_timeout"`

	// Bound on each store call: claim, complete, release, claim renewal (on
	// DynamoDB, on each of its requests: a large response's completion takes as
	// many as it needs).
	//
	// Default: 5s.
	StoreTimeout time.Duration `json:"store_timeout"`

	// How long a finished response is retried into an unreachable store, also
	// past its claim while nobody else claims the key.
	//
	// Default: 5m.
	CompleteRetry time.Duration `json:"complete_retry"`

	// A first execution sent upstream with no complete answer (a reset after the
	// request was written, a timeout, a body cut mid-stream, handler_timeout),
	// or whose claim lapsed (its instance died): 'hold' its key for unknown_hold
	// (retries get the same outcome-unknown answer, nothing runs twice, until
	// the route's reconcile or an operator settles it) or 'release' it, so that
	// a retry runs again (see docs/unknown-outcomes.md).
	//
	// Default: hold.
	UnknownOutcome string `json:"unknown_outcome"`

	// How long an unknown outcome holds its key (a lapsed claim's: from the
	// lease's end).
	//
	// Default: 24h.
	UnknownHold time.Duration `json:"unknown_hold"`

	// Retry-After sent with '409' (in flight) and '503' (store unavailable,
	// overloaded).
	//
	// Default: 1s.
	RetryAfter time.Duration `json:"retry_after"`

	// A duplicate of an in-flight request waits this long for its result, then
	// replays it, instead of an immediate '409' (which it still gets on
	// timeout); if the first's key is released, one waiter claims it and runs.
	// Stores that notify wake waiters at once; others are read again every
	// wait_poll. '0': no waiting.
	//
	// Default: 0s.
	Wait time.Duration `json:"wait"`

	// How often a waiter reads the store again when no notification comes.
	//
	// Default: 250ms.
	WaitPoll time.Duration `json:"wait_poll"`

	// Deduplicate concurrent duplicates but store no result: the key is released
	// when the response is done, so that a later retry runs again.
	//
	// Default: false.
	InFlightOnly bool `json:"in_flight_only"`

	// KeySource finds the key; nil means HeaderKey{KeyHeader}. Package
	// keysource has the others (and config builds them from key_source).
	KeySource KeySource `json:"-" default:"'HeaderKey{KeyHeader}'"`

	// Verifier authenticates a request before its key is claimed (package
	// webhook); nil: none.
	Verifier Verifier `json:"-"`

	// ErrorFormat renders the answers the core writes itself; nil means
	// ProblemJSON. Package errformat has Stripe's shape and JSON templates.
	ErrorFormat ErrorFormat `json:"-" default:"'ProblemJSON'"`

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
	Logger *slog.Logger `json:"-" default:"'slog.Default()'"`

	// Observer is called once per tracked request with its outcome, for
	// metrics and access logs. It runs on the request's goroutine and must not
	// block.
	Observer func(Event) `json:"-"`

	// TraceContext is called at each claim with the request's context: the
	// bytes it returns (at most cache.MaxTrace; nil for none) are the first
	// execution's trace context, kept with the claim and the stored response,
	// and handed to the observer of every duplicate as Event.Origin, so a
	// tracer can link the duplicate's span to the first's. Package tracing
	// fits it to OpenTelemetry.
	TraceContext func(context.Context) []byte `json:"-"`

	// RequestInfo, when set, is called at each claim: what the packaging
	// knows of the request beyond it (its request id, its client's address,
	// its route), which the record keeps for operators (cache.Info, shown by
	// the admin APIs). Unset: the request's X-Request-Id header, its
	// RemoteAddr, and no route. The proxy sets it from what it logs.
	RequestInfo func(*http.Request) RequestInfo `json:"-"`

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
		StoreStatuses:   defaultStoreStatuses(),
		BodyReadTimeout: time.Minute,
		TTL:             24 * time.Hour,
		ClaimTTL:        30 * time.Second,
		HandlerTimeout:  5 * time.Minute,
		StoreTimeout:    5 * time.Second,
		CompleteRetry:   5 * time.Minute,
		UnknownOutcome:  UnknownHold,
		UnknownHold:     24 * time.Hour,
		RetryAfter:      time.Second,
		WaitPoll:        250 * time.Millisecond,
	}
}

// settingErr is the error of a bad setting: a *cache.FieldError naming it
// by its json name (lock_ttl), so each surface can name it in its own terms.
func settingErr(field, format string, args ...any) error {
	return cache.FieldErrorf("", field, format, args...)
}

// Check reports the first setting that New would refuse, as a *cache.FieldError.
// It is the one place each rule is checked.
func (s *Settings) Check() error {
	_, err := compile(s)
	return err
}
