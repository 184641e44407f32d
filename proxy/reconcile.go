package proxy

// Reconcile: each route that names a reconcile request schedules its held
// unknown outcomes in the store (package reconcile's Scheduler, the route's
// OnHold), and one worker per proxy works the due ones, whichever instance
// held them.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/config"
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

// reconcileRules are the reconcile rules of the route whose settings cc
// compiled into s, nil when it names no reconcile request. How long the
// original may still be running upstream (Rules.Running) is upstream_timeout,
// else the route's handler_timeout: what the proxy itself lets a request take.
func (c *Config) reconcileRules(cc config.Config, s middleware.Settings) (*reconcile.Rules, error) {
	rules, err := cc.ReconcileRules(s)
	if err != nil || rules == nil {
		return nil, err
	}
	rules.Running = c.UpstreamTimeout
	if rules.Running <= 0 {
		rules.Running = s.HandlerTimeout
	}
	if rules.Running <= 0 {
		return nil, cache.FieldErrorf("", "reconcile",
			"a not-found answer releases a key only once the original can no longer be running upstream, and nothing bounds how long it runs: "+
				"set upstream_timeout or handler_timeout (both are 0)")
	}
	if err := rules.Check(); err != nil {
		return nil, err
	}
	return rules, nil
}

// reconcileRoute sets s.OnHold to schedule the route's held keys when it
// reconciles (rules).
func (p *Proxy) reconcileRoute(st *state, path string, rules *reconcile.Rules, s *middleware.Settings) error {
	if rules == nil {
		return nil
	}
	jobs, ok := st.cache.(cache.Reconciler)
	if !ok {
		kind, _ := stores.KindOf(st.cfg.Store)
		return cache.FieldErrorf("", "reconcile", "the %s store keeps no reconcile jobs", kind)
	}
	if st.rc == nil {
		upstream, _, _ := upstreamURL(st.cfg.Upstream) // checked by Validate
		w := &reconcile.Worker{Store: st.cache, Jobs: jobs, Routes: map[string]*reconcile.Rules{}, Upstream: upstream,
			Prepare: st.fwd.reconcilePrepare, Logger: p.log, Observe: p.metrics.reconcile.Observe, StoreTimeout: s.StoreTimeout}
		t := newUpstreamTransport(st.cfg.Upstream, 0)
		if p.tracing {
			w.Transport, w.Trace = otelhttp.NewTransport(t), traceReconcile
		} else {
			w.Transport = t
		}
		st.rc = &reconciler{w: w}
	}
	st.rc.w.Routes[path] = rules
	sched := &reconcile.Scheduler{Route: path, Rules: rules, Jobs: jobs, Due: st.rc.w.Wake, StoreTimeout: s.StoreTimeout,
		Forwarded: st.fwd.reconcileHeaders}
	s.OnHold = sched.Hold
	return nil
}

// A reconcile request goes to the route's upstream as the route's own requests
// do, as far as it tells the upstream which site it is for: the Host
// upstream_host decides (upstreamHost, from the original's canonical Host kept
// with the job), and the forwarding headers of the original's forwarded
// request that name the site it was addressed to (X-Forwarded-Proto,
// X-Forwarded-Host, Forwarded's proto and host), kept with the job when the
// key is held. A virtual-hosted upstream (an ingress, a multi-tenant API)
// finds the same site it ran the original on. It does not carry what names a
// client (X-Forwarded-For, Forwarded's for=, X-Real-IP): the proxy sends it on its own,
// on no client's connection, and claims no one's address. It carries a
// request id of its own (request_id_header), as every request the proxy
// sends does.

// reconcileHeaders are the forwarding headers a reconcile request for the held
// request in carries: those rewrite gives in's forwarded request, without the
// client's address.
func (f *forwarding) reconcileHeaders(in *http.Request) http.Header {
	pr := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: http.Header{}}}
	f.rewrite(pr)
	h := pr.Out.Header
	delete(h, "X-Forwarded-For")
	delete(h, "X-Real-Ip") // names the client, as X-Forwarded-For does
	if fwd := withoutFor(h.Get("Forwarded")); fwd != "" {
		h["Forwarded"] = []string{fwd}
	} else {
		delete(h, "Forwarded")
	}
	return h
}

// reconcilePrepare readies a reconcile request: its Host (upstreamHost) and a
// request id. A job stored before jobs kept the original's Host cannot be sent
// with the client's Host: it is refused, and its key stays held for an
// operator, rather than sent to a Host the original never went to.
func (f *forwarding) reconcilePrepare(req *http.Request, job *cache.Job) error {
	if f.host == UpstreamHostClient && job.Legacy() {
		return errors.New("upstream_host is client, and this job was stored by an earlier version that kept no client Host; settle the key with idemproxy keys")
	}
	req.Host = f.upstreamHost(job.Host)
	if f.idHeader != "" {
		req.Header[f.idHeader] = []string{newRequestID()}
	}
	return nil
}

// withoutFor is a Forwarded header (RFC 7239, checked by inbound or written by
// forwarded) without its for= pairs; an element left empty is dropped.
func withoutFor(v string) string {
	var elems []string
	for _, elem := range splitUnquoted(v, ',') {
		var pairs []string
		for _, pair := range splitUnquoted(elem, ';') {
			pair = strings.TrimSpace(pair)
			name, _, _ := strings.Cut(pair, "=")
			if pair != "" && !strings.EqualFold(strings.TrimSpace(name), "for") {
				pairs = append(pairs, pair)
			}
		}
		if len(pairs) > 0 {
			elems = append(elems, strings.Join(pairs, ";"))
		}
	}
	return strings.Join(elems, ", ")
}

// splitUnquoted splits s at each sep outside a quoted string.
func splitUnquoted(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
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
