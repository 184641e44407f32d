package config

import (
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

// Reconcile is how a route settles its held unknown outcomes by asking the
// upstream (package reconcile): the standalone proxy's, which knows the
// upstream. Off while Request is empty.
type Reconcile struct {
	// Proxy only: a request sent upstream to settle a held unknown outcome,
	// 'METHOD /path?query' with '{key}', '{header.NAME}' and '{json:/pointer}'
	// filled from the original request; empty: held for an operator. Sent with
	// the route's upstream_host; a value in the path must be letters, digits and
	// '- . _ ~', not ending in '.' (else nothing is sent, the key stays held:
	// put such a placeholder in the query). Needs upstream_timeout or
	// handler_timeout (see docs/reconcile.md).
	//
	// Default: none.
	Request string `json:"reconcile" go:"'reconcile.Rules.Request', 'reconcile.ParseRequest'"`

	// Headers of the original request copied onto the reconcile request (e.g.
	// Authorization); kept in the store with the job until the key settles.
	//
	// Default: none.
	Headers []string `json:"reconcile_headers" needs:"reconcile"`

	// Reconcile answers that mean it happened: the answer (status, Content-Type,
	// body up to max_body) is stored, and retries replay it.
	//
	// Default: 200.
	Done middleware.StatusSet `json:"reconcile_done" needs:"reconcile"`

	// Reconcile answers that mean it did not happen: the key is released, and
	// the retry runs; but only at the second such answer since the original can
	// no longer be running (upstream_timeout, else handler_timeout, after it was
	// sent); one before does not count, and the next attempt comes no earlier
	// than then.
	//
	// Default: 404.
	NotFound middleware.StatusSet `json:"reconcile_not_found" needs:"reconcile"`

	// Wait after the unknown outcome before the first attempt.
	//
	// Default: 1s.
	Delay time.Duration `json:"reconcile_delay" needs:"reconcile"`

	// Each later wait between attempts is the one before times this.
	//
	// Default: 2.
	Backoff int `json:"reconcile_backoff" needs:"reconcile"`

	// Longest wait between attempts.
	//
	// Default: 1m.
	MaxDelay time.Duration `json:"reconcile_max_delay" needs:"reconcile"`

	// Attempts at most; then the key stays held for an operator. At least '2' (a
	// not-found answer is confirmed by a second).
	//
	// Default: 10.
	Attempts int `json:"reconcile_attempts" needs:"reconcile"`

	// No attempt starts later than this after the unknown outcome. At least
	// upstream_timeout (else handler_timeout) and 2 × reconcile_delay, so that a
	// not-found answer can be confirmed: a shorter one is refused.
	//
	// Default: 1h.
	Window time.Duration `json:"reconcile_window" needs:"reconcile"`

	// Bound on one attempt (the answer's headers and body).
	//
	// Default: 10s.
	Timeout time.Duration `json:"reconcile_timeout" needs:"reconcile"`
}

// DefaultReconcile is Reconcile's defaults (off: no request).
func DefaultReconcile() Reconcile {
	done, _ := middleware.ParseStatuses("200")
	notFound, _ := middleware.ParseStatuses("404")
	return Reconcile{Done: done, NotFound: notFound, Delay: time.Second, Backoff: 2, MaxDelay: time.Minute,
		Attempts: 10, Window: time.Hour, Timeout: 10 * time.Second}
}

// ReconcileRules builds the route's reconcile rules from c and its compiled
// settings s; nil when c names no reconcile request. Every error names its
// setting.
func (c Config) ReconcileRules(s middleware.Settings) (*reconcile.Rules, error) {
	r := c.Reconcile
	if r.Request == "" {
		return nil, nil // a reconcile_* setting set without it: Compile refuses it (needs tag)
	}
	req, err := reconcile.ParseRequest(r.Request)
	if err != nil {
		return nil, cache.FieldErrorf("", "reconcile", "%v", err)
	}
	if s.UnknownOutcome != middleware.UnknownHold || s.InFlightOnly {
		return nil, cache.FieldErrorf("", "reconcile", "settles held unknown outcomes: it needs unknown_outcome hold (and no in_flight_only)")
	}
	rules := &reconcile.Rules{Request: req, Headers: r.Headers, Done: r.Done, NotFound: r.NotFound, Delay: r.Delay,
		Backoff: r.Backoff, MaxDelay: r.MaxDelay, Attempts: r.Attempts, Window: r.Window, Timeout: r.Timeout,
		MaxBody: s.MaxBody, TTL: s.TTL}
	if err := rules.Check(); err != nil {
		return nil, err
	}
	return rules, nil
}
