package proxy

import (
	"context"
	crand "crypto/rand"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
)

// BenchmarkForwarding is what the proxy does per request for the forwarding
// headers and the request id: inbound on the request as the server hands it
// over (a header map sized for the lines received, Host removed), then, as
// ReverseProxy does before Rewrite, a clone with the forwarding headers
// deleted, and rewrite on it. "client" is a client connecting directly (the
// bench's request: Content-Type, Authorization, Content-Length,
// Idempotency-Key); "behind-lb" the same request through a trusted load
// balancer that adds X-Forwarded-For, X-Forwarded-Proto and X-Request-Id.
// "client-setup" does the rest without inbound and rewrite: what to subtract
// from "client" for their own cost.
func BenchmarkForwarding(b *testing.B) {
	f, err := newForwarding(&Config{TrustedProxies: []string{"10.0.0.0/8"}, UpstreamHost: UpstreamHostUpstream, RequestIDHeader: "X-Request-Id"})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse("/v1/charges")
	base := [][2]string{
		{"Content-Type", "application/json"},
		{"Authorization", "Bearer sk_test_bench"},
		{"Content-Length", "27"},
		{"Idempotency-Key", "k-0123456789"},
	}
	lb := append(base[:len(base):len(base)],
		[2]string{"X-Forwarded-For", "203.0.113.9"},
		[2]string{"X-Forwarded-Proto", "https"},
		[2]string{"X-Request-Id", "lb-7f3a9c2e"})
	for _, c := range []struct {
		name, peer string
		header     [][2]string
		setupOnly  bool
	}{
		{"client", "203.0.113.9:51234", base, false},
		{"behind-lb", "10.0.0.5:40112", lb, false},
		{"client-setup", "203.0.113.9:51234", base, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			none := &reqInfo{}
			var out *http.Request
			for b.Loop() {
				h := make(http.Header, len(c.header)+1) // textproto's hint counts the Host line
				for _, kv := range c.header {
					h[kv[0]] = []string{kv[1]}
				}
				r := &http.Request{Method: "POST", URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: h, Host: "api.example", RemoteAddr: c.peer, RequestURI: "/v1/charges"}
				info := none
				if !c.setupOnly {
					info = f.inbound(r)
				}
				r = r.WithContext(context.WithValue(ctx, reqInfoKey{}, info))
				o := r.Clone(ctx)
				for _, name := range [...]string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
					delete(o.Header, name)
				}
				pr := &httputil.ProxyRequest{In: r, Out: o}
				if !c.setupOnly {
					f.rewrite(pr)
				}
				out = pr.Out
			}
			if !c.setupOnly && (out.Header.Get("Forwarded") == "" || out.Header.Get("X-Request-Id") == "") {
				b.Fatalf("rewrite: %v", out.Header)
			}
		})
	}
}

// BenchmarkRequestID compares the request id the proxy generates with the
// crypto/rand.Text it used before (same form: 26 characters, 130 bits), from
// one goroutine and from as many as GOMAXPROCS.
func BenchmarkRequestID(b *testing.B) {
	for _, c := range []struct {
		name string
		gen  func() string
	}{{"rand.Text", crand.Text}, {"pooled-ChaCha8", newRequestID}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.gen()
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.gen()
				}
			})
		})
	}
}
