// Package reconcile settles held unknown outcomes by asking the upstream. A
// route that names a reconcile request (Request: "GET /v1/charges?key={key}")
// gets, for every key held as an unknown outcome, a job in the store
// (cache.Reconciler): the request rendered from the first execution's request,
// and a schedule with backoff, bounded in attempts and in time. A Worker on
// every instance claims due jobs from the store (one claimer per job, fenced
// by a claim), sends the request upstream, and settles the key by the route's
// Rules: a "done" answer becomes the stored response; a "not found" answer
// releases the key so the client's retry runs, but only once the original
// can no longer be running (Rules.Running after it was sent) and a second
// not-found answer confirms the first; anything else is tried again until the
// attempts or the window run out; then the key stays held for an operator.
// The original operation is never sent by this package.
package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// Rules are one route's reconcile settings.
type Rules struct {
	Request  *Request             // what is sent upstream
	Headers  []string             // request headers of the first execution copied onto it
	Done     middleware.StatusSet // answers that mean "it happened": stored for replay
	NotFound middleware.StatusSet // answers that mean "it did not": the key is released
	Delay    time.Duration        // before the first attempt
	Backoff  int                  // each later delay is the one before times this
	MaxDelay time.Duration        // bound on a delay
	Attempts int                  // attempts at most
	Window   time.Duration        // no attempt starts later than this after the hold
	// Running is how long the upstream may still be working on the original
	// after it was sent (the proxy's upstream_timeout, else the route's
	// handler_timeout): a not-found answer releases the key only from then
	// on, and only when it is the second. Zero: no bound is known, and a
	// second not-found answer alone releases the key.
	Running time.Duration
	Timeout time.Duration // bound on one attempt (headers and body)
	MaxBody int64         // largest "done" body stored for replay (the route's max_body)
	TTL     time.Duration // how long a "done" answer is kept (the route's ttl)
}

// Check reports what is wrong with r: a *cache.FieldError naming the
// setting.
func (r *Rules) Check() error {
	bad := func(field, format string, args ...any) error { return cache.FieldErrorf("", field, format, args...) }
	switch {
	case r.Request == nil:
		return bad("reconcile", "no request")
	case r.Delay <= 0:
		return bad("reconcile_delay", "must be positive, got %v", r.Delay)
	case r.Backoff < 1:
		return bad("reconcile_backoff", "must be at least 1, got %d", r.Backoff)
	case r.MaxDelay < r.Delay:
		return bad("reconcile_max_delay", "must be at least reconcile_delay (%v), got %v", r.Delay, r.MaxDelay)
	case r.Attempts < 1:
		return bad("reconcile_attempts", "must be at least 1, got %d", r.Attempts)
	case r.Window <= 0:
		return bad("reconcile_window", "must be positive, got %v", r.Window)
	case r.Timeout <= 0:
		return bad("reconcile_timeout", "must be positive, got %v", r.Timeout)
	case r.Done.Empty():
		return bad("reconcile_done", "must name at least one status")
	case r.Running < 0:
		return bad("reconcile", "the original's run bound is negative (%v)", r.Running)
	}
	for c := 100; c < 1000; c++ {
		if r.Done.Has(c) && r.NotFound.Has(c) {
			return bad("reconcile_not_found", "%d is also in reconcile_done", c)
		}
	}
	if r.NotFound.Empty() {
		return nil
	}
	// A not-found answer releases a key when it is the second one and the
	// original can no longer be running: answered from the first attempt
	// on, that is at the second attempt (Delay after the first) or at
	// Running after the original was sent, whichever is later, and the
	// schedule must reach it.
	if r.Attempts < 2 {
		return bad("reconcile_attempts", "must be at least 2: a not-found answer releases the key only when a second one confirms it, got %d", r.Attempts)
	}
	if need := max(2*r.Delay, r.Running); r.Window < need {
		return bad("reconcile_window", "%v leaves no room to confirm a not-found answer once the original can no longer be running: "+
			"make it at least %v (the longer of 2 × reconcile_delay and how long the original may run, %v: upstream_timeout, or handler_timeout without it)",
			r.Window, need, r.Running)
	}
	return nil
}

// sent is when the original of job was sent. A legacy job did not keep it:
// its hold is taken instead (no earlier than the send), from its deadline.
func (r *Rules) sent(job *cache.Job) time.Time {
	if job.Legacy() {
		return job.Deadline.Add(-r.Window)
	}
	return job.Sent
}

// delay is the wait before attempt n+1, after n attempts (n ≥ 1): Delay times
// Backoff^(n-1), at most MaxDelay.
func (r *Rules) delay(n int) time.Duration {
	d := r.Delay
	for i := 1; i < n && d < r.MaxDelay; i++ {
		d *= time.Duration(r.Backoff)
	}
	return min(d, r.MaxDelay)
}

// lease is how long a claim on a job lasts: past one attempt and the store
// calls that record it, so a live claimer never loses its job to another.
func (r *Rules) lease() time.Duration { return 2*r.Timeout + 5*time.Second }

// Scheduler puts held keys of one route on the reconcile schedule: its Hold
// is the route's middleware.Settings.OnHold.
type Scheduler struct {
	Route string
	Rules *Rules
	Jobs  cache.Reconciler
	// Due, when set, is told when a scheduled job is next due (the Worker's
	// Wake), so that the local instance needs not wait for its next poll.
	Due func(time.Time)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StoreTimeout bounds the store call.
	StoreTimeout time.Duration
	// Forwarded, when set, returns the forwarding headers the route's
	// forwarded request for r carried that the reconcile request repeats
	// (the proxy's: the site r was addressed to, not who sent it). They are
	// kept with the job, and win over a copied header of the same name.
	Forwarded func(r *http.Request) http.Header
}

// Hold renders the reconcile request from the held request and stores its job,
// with what the request is sent by: the original's Host (canonical), the
// forwarding headers, and when the original was sent. A request that cannot
// be rendered (a placeholder with nothing to fill it, or a value a path cannot
// take) schedules nothing: its key stays held for an operator.
func (s *Scheduler) Hold(ctx context.Context, h middleware.Held) error {
	url, err := s.Rules.Request.Render(h)
	if err != nil {
		return fmt.Errorf("reconcile request: %w", err)
	}
	host, err := middleware.CanonicalHost(h.Request.Host)
	if err != nil {
		return fmt.Errorf("reconcile request: %w", err)
	}
	size := len(url) + len(host)
	var hdr http.Header
	add := func(name string, vals []string) {
		if hdr == nil {
			hdr = http.Header{}
		}
		for _, v := range vals {
			size += len(name) + len(v)
		}
		hdr[http.CanonicalHeaderKey(name)] = append([]string(nil), vals...)
	}
	for _, name := range s.Rules.Headers {
		if vals := h.Request.Header.Values(name); len(vals) > 0 {
			add(name, vals)
		}
	}
	if s.Forwarded != nil {
		for name, vals := range s.Forwarded(h.Request) {
			add(name, vals)
		}
	}
	if size > MaxRendered {
		return fmt.Errorf("reconcile request: its URL and headers take %d bytes, more than %d", size, MaxRendered)
	}
	now := s.now()
	sent := h.Sent
	if sent.IsZero() {
		sent = now // not told: the hold, which is no earlier
	}
	job := &cache.Job{Route: s.Route, Method: s.Rules.Request.Method, URL: url, Header: hdr, Host: host, Sent: sent,
		State: cache.JobScheduled, Due: now.Add(s.Rules.Delay), Deadline: now.Add(s.Rules.Window), Until: now.Add(h.Hold)}
	if s.StoreTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.StoreTimeout)
		defer cancel()
	}
	if err := s.Jobs.ScheduleReconcile(ctx, h.StoreKey, job); err != nil {
		return fmt.Errorf("scheduling reconcile: %w", err)
	}
	if s.Due != nil {
		s.Due(job.Due)
	}
	return nil
}

func (s *Scheduler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
