package proxy

// The upstream: its URL and transport, the proxy's one reverse proxy to it,
// a first execution's call (attempt) and its classification, and the answer
// to a call that failed.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/middleware"
)

// Problem types the proxy answers itself.
const (
	// ProblemUpstream: a 502/504 when the upstream fails.
	ProblemUpstream = middleware.ProblemTypeBase + "upstream-unavailable"
	// ProblemPath: a 400 for a path that is not in canonical form (the core's
	// problem type; see middleware.CanonicalPath).
	ProblemPath = middleware.ProblemNonCanonicalPath
)

// upstreamURL parses the upstream URL: http://, https:// or h2c:// with a
// host. An h2c:// URL is sent to as http://, over cleartext HTTP/2 (h2c).
func upstreamURL(raw string) (u *url.URL, h2c bool, err error) {
	u, err = url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" && u.Scheme != h2cScheme {
		return nil, false, fmt.Errorf("want an absolute http://, https:// or h2c:// URL")
	}
	if u.Scheme == h2cScheme {
		c := *u
		c.Scheme = "http"
		return &c, true, nil
	}
	return u, false, nil
}

// newUpstreamTransport is the transport to the upstream URL raw (checked by
// Validate): HTTP/1.1 or, over TLS, HTTP/2; only cleartext HTTP/2 to an h2c://
// upstream.
func newUpstreamTransport(raw string, responseHeaderTimeout time.Duration) *http.Transport {
	if _, h2c, _ := upstreamURL(raw); h2c {
		return forward.NewH2CTransport(responseHeaderTimeout)
	}
	return forward.NewTransport(responseHeaderTimeout)
}

// sameTransport reports whether a configuration with upstream URL b and
// upstream_timeout tb can keep the transport of one with a and ta.
func sameTransport(a string, ta time.Duration, b string, tb time.Duration) bool {
	_, ha, _ := upstreamURL(a)
	_, hb, _ := upstreamURL(b)
	return ta == tb && ha == hb
}

// upstreamTransport is the transport to the upstream; with tracing, each call is
// a client span and carries its traceparent upstream.
func upstreamTransport(cfg *Config) http.RoundTripper {
	t := newUpstreamTransport(cfg.Upstream, cfg.UpstreamTimeout)
	if !cfg.tracing {
		return t
	}
	return otelhttp.NewTransport(t)
}

// reverseProxy is st's reverse proxy to the upstream. As it is, it forwards
// the requests the core does not track, and answers a failed call itself;
// attempt runs a first execution through a copy of it.
func (p *Proxy) reverseProxy(st *state) *httputil.ReverseProxy {
	target, _, _ := upstreamURL(st.cfg.Upstream) // checked by Validate
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			st.fwd.rewrite(pr)
			// The core read the body into memory (GetBody is set only then).
			// ReverseProxy wraps the outbound body in a type the transport
			// does not know, so it would write the headers and the body
			// upstream apart: two writes, two wake-ups of the upstream. A
			// fresh reader over the same bytes goes out in one write.
			if pr.In.GetBody != nil && pr.Out.ContentLength > 0 {
				if b, err := pr.In.GetBody(); err == nil {
					pr.Out.Body = b
				}
			}
		},
		Transport:  st.transport,
		BufferPool: forward.BufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.logUpstreamError(r, err)
			p.upstreamProblem(w, r, st.routeOf(r).h, err)
		},
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
}

// attempt is the core's Next: a first execution's call upstream, through a
// copy of st's reverse proxy whose request is guarded against a re-send
// (forward.Attempt) and whose failure is not answered here but classified
// for the core (not sent: released; sent: an unknown outcome), which answers
// it (ServeHTTP: upstreamProblem, once the key is released).
func (p *Proxy) attempt(st *state, w http.ResponseWriter, r *http.Request) error {
	defer p.metrics.upstream.Done(p.metrics.upstream.Start())
	c := &upstreamCall{rp: *st.rp} // one allocation for the call's state
	rewrite := st.rp.Rewrite
	c.rp.Rewrite = func(pr *httputil.ProxyRequest) {
		rewrite(pr)
		pr.Out = c.a.Guard(pr.Out, pr.In.GetBody)
	}
	c.rp.ErrorHandler = func(_ http.ResponseWriter, r *http.Request, err error) {
		p.logUpstreamError(r, err)
		c.err = err
	}
	c.rp.ServeHTTP(w, r)
	return c.a.Classify(c.err)
}

// upstreamCall is one attempt's state: its reverse proxy, what the transport
// wrote, and the error the call failed with.
type upstreamCall struct {
	rp  httputil.ReverseProxy
	a   forward.Attempt
	err error
}

func (p *Proxy) logUpstreamError(r *http.Request, err error) {
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug // the client went away
	}
	p.log.LogAttrs(r.Context(), level, "upstream error", slog.String("path", r.URL.Path), slog.Any("error", err))
}

// upstreamProblem answers, in the error format of the route h serves, a
// failed upstream call whose key (if any) was released: 504 when it timed
// out, 502 otherwise.
func (p *Proxy) upstreamProblem(w http.ResponseWriter, r *http.Request, h *middleware.Handler, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	h.WriteProblem(w, r, middleware.Problem{
		Type:      ProblemUpstream,
		Title:     "Upstream unavailable",
		Status:    status,
		Detail:    "the upstream could not be reached or did not answer; the request may be retried with the same key",
		Retryable: true, // it never left, or its key was released
	}, 0)
}
