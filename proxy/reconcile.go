package proxy

// Reconcile: each route that names a reconcile request schedules its held
// unknown outcomes in the store (package reconcile's Scheduler, the route's
// OnHold), and one worker per proxy works the due ones, whichever instance
// held them.

import (
	"context"
	"fmt"
	"net/url"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

// reconciler is the proxy's reconcile worker and what stops it.
type reconciler struct {
	w      *reconcile.Worker
	cancel context.CancelFunc
	done   chan struct{}
}

// reconcileRoute sets s.OnHold to schedule the route's held keys when cc names
// a reconcile request.
func (p *Proxy) reconcileRoute(st *state, path string, cc config.Config, s *middleware.Settings) error {
	rules, err := cc.ReconcileRules(*s)
	if err != nil || rules == nil {
		return err
	}
	jobs, ok := st.cache.(cache.Reconciler)
	if !ok {
		kind, _ := stores.KindOf(st.cfg.Store)
		return &middleware.SettingsError{Field: "reconcile", Err: fmt.Errorf("the %s store keeps no reconcile jobs", kind)}
	}
	if st.rc == nil {
		upstream, _ := url.Parse(st.cfg.Upstream) // checked by Validate
		w := &reconcile.Worker{Store: st.cache, Jobs: jobs, Routes: map[string]*reconcile.Rules{}, Upstream: upstream,
			Logger: p.log, Observe: p.metrics.reconcile.Observe, StoreTimeout: s.StoreTimeout}
		t := forward.NewTransport(0)
		if p.tracing {
			w.Transport, w.Trace = otelhttp.NewTransport(t), traceReconcile
		} else {
			w.Transport = t
		}
		st.rc = &reconciler{w: w}
	}
	st.rc.w.Routes[path] = rules
	sched := &reconcile.Scheduler{Route: path, Rules: rules, Jobs: jobs, Due: st.rc.w.Wake, StoreTimeout: s.StoreTimeout}
	s.OnHold = sched.Hold
	return nil
}

// startReconcile starts the state's worker, when a route reconciles.
func (st *state) startReconcile() {
	if st.rc == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.rc.cancel, st.rc.done = cancel, make(chan struct{})
	go func() {
		defer close(st.rc.done)
		st.rc.w.Run(ctx)
	}()
}

// stopReconcile stops the state's worker and waits for the attempts under
// way. A reload stops the replaced state's worker before its store closes;
// the new state's worker takes the due jobs from the store.
func (st *state) stopReconcile() {
	if st.rc != nil && st.rc.cancel != nil {
		st.rc.cancel()
		<-st.rc.done
	}
}

// traceReconcile is a span per reconcile attempt; the request's client span
// (otelhttp's transport) is its child.
func traceReconcile(ctx context.Context, a *reconcile.Attempt) (context.Context, func()) {
	route := a.Route
	if route == "" {
		route = "/"
	}
	ctx, span := otel.Tracer("github.com/idemproxy/idemproxy/reconcile").Start(ctx, "idempotency.reconcile "+route,
		trace.WithAttributes(attribute.String("idempotency.key_hash", a.KeyHash), attribute.Int("idempotency.reconcile.attempt", a.Attempt)))
	return ctx, func() {
		span.SetAttributes(attribute.String("idempotency.reconcile.answer", a.Answer))
		if a.Status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", a.Status))
		}
		if a.Err != nil {
			span.RecordError(a.Err)
			span.SetStatus(codes.Error, a.Err.Error())
		}
		span.End()
	}
}
