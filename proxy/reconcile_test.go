package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// A reconcile request carries the Host the original's forwarded request did,
// under every upstream_host: one function decides both, from the client's
// Host as it came (rewrite) or as the job keeps it (canonical).
func TestReconcileHostIsTheForwardedOne(t *testing.T) {
	for policy, want := range map[string]string{UpstreamHostUpstream: "", UpstreamHostClient: "shop.example", "internal.api:9000": "internal.api:9000"} {
		f, err := newForwarding(&Config{UpstreamHost: policy, RequestIDHeader: "X-Request-Id"})
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"shop.example", "Shop.Example.:443", "SHOP.example:80"} {
			in := httptest.NewRequest("POST", "/charges", nil)
			in.Host = host
			pr := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: http.Header{}}}
			f.rewrite(pr)
			canonical, err := middleware.CanonicalHost(host)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/lookup", nil)
			req.Host = ""
			if err := f.reconcilePrepare(req, &cache.Job{Host: canonical, Sent: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if pr.Out.Host != want || req.Host != want {
				t.Errorf("upstream_host %s, client Host %q: forwarded with Host %q, reconciled with %q; want %q for both", policy, host, pr.Out.Host, req.Host, want)
			}
		}
	}
	// An untracked request's Host that has no canonical form goes as it came.
	f, _ := newForwarding(&Config{UpstreamHost: UpstreamHostClient})
	if h := f.upstreamHost("a,b"); h != "a,b" {
		t.Errorf("upstreamHost(a,b) = %q", h)
	}
}

// The forwarding headers of a reconcile request are the original's forwarded
// request's that name the site (proto, host), never the client's address;
// each attempt has a request id of its own; a legacy job, which kept no Host,
// is not sent under upstream_host client.
func TestReconcileForwardingHeaders(t *testing.T) {
	f, err := newForwarding(&Config{TrustedProxies: []string{"10.0.0.0/8"}, UpstreamHost: UpstreamHostClient, RequestIDHeader: "X-Request-Id"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/charges", nil)
	r.RemoteAddr, r.Host, r.TLS = "10.0.0.5:1", "api.example", nil
	for k, v := range map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.example",
		"Forwarded": `for=203.0.113.9;proto=https;host=shop.example;by="[fd00::1]:443"`} {
		r.Header.Set(k, v)
	}
	r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, f.inbound(r)))
	h := f.reconcileHeaders(r)
	want := http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"shop.example"},
		"Forwarded": {`proto=https;host=shop.example;by="[fd00::1]:443", proto=http;host=api.example`}}
	if len(h) != len(want) {
		t.Errorf("reconcile headers %v, want %v", h, want)
	}
	for k, v := range want {
		if h.Get(k) != v[0] {
			t.Errorf("%s %q, want %q", k, h.Get(k), v[0])
		}
	}

	ids := map[string]bool{}
	for range 2 {
		req := httptest.NewRequest("GET", "/lookup", nil)
		if err := f.reconcilePrepare(req, &cache.Job{Host: "api.example", Sent: time.Now()}); err != nil {
			t.Fatal(err)
		}
		ids[req.Header.Get("X-Request-Id")] = true
	}
	if len(ids) != 2 || ids[""] {
		t.Errorf("request ids of two attempts: %v, want two", ids)
	}
	if err := f.reconcilePrepare(httptest.NewRequest("GET", "/lookup", nil), &cache.Job{}); err == nil {
		t.Error("a legacy job under upstream_host client was prepared; want refused")
	}
}

func TestWithoutFor(t *testing.T) {
	for in, want := range map[string]string{
		"for=1.2.3.4":                            "",
		"for=1.2.3.4;proto=http;host=a":          "proto=http;host=a",
		`For="[2001:db8::1]:1";host="a:8443"`:    `host="a:8443"`,
		`for=a, for=b;proto=https, host=x;for=c`: "proto=https, host=x",
		`proto=https;host="a;b,c"`:               `proto=https;host="a;b,c"`,
	} {
		if got := withoutFor(in); got != want {
			t.Errorf("withoutFor(%q) = %q, want %q", in, got, want)
		}
	}
}
