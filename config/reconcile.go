package config

import (
	"reflect"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

// Reconcile is how a route settles its held unknown outcomes by asking the
// upstream (package reconcile): the standalone proxy's, which knows the
// upstream. Off while Request is empty.
type Reconcile struct {
	// Request is sent upstream after an unknown outcome, to ask what became
	// of the operation: "METHOD /path?query", a path on the upstream whose
	// placeholders are filled from the first execution's request: {key},
	// {header.NAME}, {json:/pointer} (a string in its JSON body). A value in
	// the path must be one literal segment (letters, digits and - . _ ~, not
	// ending in "."); any other leaves the key held for an operator, so a
	// placeholder whose values may be anything belongs in the query. Empty:
	// no reconcile, the key is held for an operator.
	Request string `json:"reconcile" help:"request sent upstream to settle an unknown outcome: METHOD /path?query with {key}, {header.NAME}, {json:/pointer} from the original request; empty: held for an operator"`

	// Headers are request headers of the first execution copied onto the
	// reconcile request (e.g. Authorization). They are kept in the store
	// with the job until the key settles.
	Headers []string `json:"reconcile_headers" help:"headers of the original request copied onto the reconcile request (kept in the store until the key settles)"`

	// Done are the reconcile answers that mean the operation happened: the
	// answer (its status, Content-Type and body, up to max_body) becomes the
	// stored response that the client's retry replays.
	Done middleware.StatusSet `json:"reconcile_done" help:"reconcile answers meaning it happened: the answer is stored and the retry replays it"`

	// NotFound are the reconcile answers that mean it did not happen: the
	// key is released and the client's retry runs. As an upstream still
	// working on the original finds nothing yet, it is believed only once
	// the original can no longer be running (the proxy's upstream_timeout,
	// else handler_timeout, after it was sent) and at a second such answer.
	NotFound middleware.StatusSet `json:"reconcile_not_found" help:"reconcile answers meaning it did not happen: the key is released and the retry runs, once the original can no longer run (upstream_timeout, else handler_timeout) and at a second such answer"`

	// Delay is the wait before the first attempt.
	Delay time.Duration `json:"reconcile_delay" help:"wait after an unknown outcome before the first reconcile attempt"`

	// Backoff multiplies each later wait.
	Backoff int `json:"reconcile_backoff" help:"each later reconcile wait is the one before times this"`

	// MaxDelay bounds a wait between attempts.
	MaxDelay time.Duration `json:"reconcile_max_delay" help:"longest wait between reconcile attempts"`

	// Attempts bounds the attempts; then the key stays held for an operator.
	// At least 2: a not-found answer is confirmed by a second.
	Attempts int `json:"reconcile_attempts" help:"reconcile attempts at most (at least 2); then the key stays held for an operator"`

	// Window bounds the time after the unknown outcome in which attempts
	// start. It must leave room to confirm a not-found answer: at least
	// upstream_timeout (else handler_timeout) and 2 × Delay.
	Window time.Duration `json:"reconcile_window" help:"no reconcile attempt starts later than this after the unknown outcome (at least upstream_timeout, else handler_timeout, and 2 × reconcile_delay)"`

	// Timeout bounds one attempt (its answer's headers and body).
	Timeout time.Duration `json:"reconcile_timeout" help:"bound on one reconcile attempt"`
}

// DefaultReconcile is Reconcile's defaults (off: no request).
func DefaultReconcile() Reconcile {
	done, _ := middleware.ParseStatuses("200")
	notFound, _ := middleware.ParseStatuses("404")
	return Reconcile{Done: done, NotFound: notFound, Delay: time.Second, Backoff: 2, MaxDelay: time.Minute,
		Attempts: 10, Window: time.Hour, Timeout: 10 * time.Second}
}

// reconcileFields are the reconcile settings beside Request.
var reconcileFields = conf.Fields(reflect.TypeFor[Reconcile]())

// ReconcileRules builds the route's reconcile rules from c and its compiled
// settings s; nil when c names no reconcile request. Every error names its
// setting.
func (c Config) ReconcileRules(s middleware.Settings) (*reconcile.Rules, error) {
	r := c.Reconcile
	if r.Request == "" {
		d := DefaultReconcile()
		for _, f := range reconcileFields {
			if f.Name != "reconcile" && !f.Equal(&r, &d) && !(f.Name == "reconcile_headers" && len(r.Headers) == 0) {
				return nil, middleware.SettingsErrorf(f.Name, "applies when reconcile is set, and it is not")
			}
		}
		return nil, nil
	}
	req, err := reconcile.ParseRequest(r.Request)
	if err != nil {
		return nil, middleware.SettingsErrorf("reconcile", "%v", err)
	}
	if s.UnknownOutcome != middleware.UnknownHold || s.InFlightOnly {
		return nil, middleware.SettingsErrorf("reconcile", "settles held unknown outcomes: it needs unknown_outcome hold (and no in_flight_only)")
	}
	rules := &reconcile.Rules{Request: req, Headers: r.Headers, Done: r.Done, NotFound: r.NotFound, Delay: r.Delay,
		Backoff: r.Backoff, MaxDelay: r.MaxDelay, Attempts: r.Attempts, Window: r.Window, Timeout: r.Timeout,
		MaxBody: s.MaxBody, TTL: s.TTL}
	if err := rules.Check(); err != nil {
		return nil, err
	}
	return rules, nil
}
