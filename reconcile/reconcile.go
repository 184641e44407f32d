// Package reconcile settles held unknown outcomes by asking the upstream. A
// route that names a reconcile request (Request: "GET /v1/charges?key={key}")
// gets, for every key held as an unknown outcome, a job in the store
// (cache.Reconciler): the request rendered from the first execution's request,
// and a schedule with backoff, bounded in attempts and in time. A Worker on
// every instance claims due jobs from the store (one claimer per job, fenced
// by a lease), sends the request upstream, and settles the key by the route's
// Rules: a "done" answer becomes the stored response, a "not found" answer
// releases the key so the client's retry runs, anything else is tried again
// until the attempts or the window run out; then the key stays held for an
// operator. The original operation is never sent by this package.
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
	Timeout  time.Duration        // bound on one attempt (headers and body)
	MaxBody  int64                // largest "done" body stored for replay (the route's max_body)
	TTL      time.Duration        // how long a "done" answer is kept (the route's ttl)
}

// Check reports what is wrong with r: a *middleware.SettingsError naming the
// setting.
func (r *Rules) Check() error {
	bad := func(field, format string, args ...any) error {
		return &middleware.SettingsError{Field: field, Err: fmt.Errorf(format, args...)}
	}
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
	}
	for c := 100; c < 1000; c++ {
		if r.Done.Has(c) && r.NotFound.Has(c) {
			return bad("reconcile_not_found", "%d is also in reconcile_done", c)
		}
	}
	return nil
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
}

// Hold renders the reconcile request from the held request and stores its job.
// A request that cannot be rendered (a placeholder with nothing to fill it)
// schedules nothing: its key stays held for an operator.
func (s *Scheduler) Hold(ctx context.Context, h middleware.Held) error {
	url, err := s.Rules.Request.Render(h)
	if err != nil {
		return fmt.Errorf("reconcile request: %w", err)
	}
	size := len(url)
	var hdr http.Header
	for _, name := range s.Rules.Headers {
		if vals := h.Request.Header.Values(name); len(vals) > 0 {
			if hdr == nil {
				hdr = http.Header{}
			}
			for _, v := range vals {
				size += len(name) + len(v)
			}
			hdr[http.CanonicalHeaderKey(name)] = append([]string(nil), vals...)
		}
	}
	if size > MaxRendered {
		return fmt.Errorf("reconcile request: its URL and copied headers take %d bytes, more than %d", size, MaxRendered)
	}
	now := s.now()
	job := &cache.Job{Route: s.Route, Method: s.Rules.Request.Method, URL: url, Header: hdr, State: cache.JobScheduled,
		Due: now.Add(s.Rules.Delay), Deadline: now.Add(s.Rules.Window), Until: now.Add(h.Hold)}
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
