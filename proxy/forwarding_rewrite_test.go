package proxy

import (
	"context"
	"crypto/tls"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"
)

// The headers rewrite sends upstream, for the forms a request takes: from a
// client or through trusted proxies that sent their own, over IPv4 or IPv6,
// TLS or not, with a Host that is a token, needs quotes, cannot be quoted, or
// is missing; X-Real-IP the client unless a trusted proxy sent one.
func TestRewriteHeaders(t *testing.T) {
	f, err := newForwarding(&Config{TrustedProxies: []string{"10.0.0.0/8", "fd00::/8"}, UpstreamHost: UpstreamHostUpstream, RequestIDHeader: "X-Request-Id"})
	if err != nil {
		t.Fatal(err)
	}
	type hdr = map[string]string
	for _, c := range []struct {
		name, peer, host string
		tls              bool
		in, want         hdr
	}{
		{"client", "203.0.113.9:1", "api.example", false, hdr{"X-Forwarded-For": "6.6.6.6", "Forwarded": "for=6.6.6.6", "X-Real-Ip": "6.6.6.6", "True-Client-Ip": "6.6.6.6"},
			hdr{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "api.example", "Forwarded": "for=203.0.113.9;proto=http;host=api.example",
				"X-Real-Ip": "203.0.113.9", "True-Client-Ip": ""}},
		{"client tls, host with a port", "203.0.113.9:1", "api.example:8443", true, nil,
			hdr{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example:8443", "Forwarded": `for=203.0.113.9;proto=https;host="api.example:8443"`}},
		{"client ipv6, no host", "[2001:db8::1]:1", "", false, nil,
			hdr{"X-Forwarded-For": "2001:db8::1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "", "Forwarded": `for="[2001:db8::1]";proto=http`, "X-Real-Ip": "2001:db8::1"}},
		{"unquotable host", "203.0.113.9:1", `a"b`, false, nil,
			hdr{"X-Forwarded-Host": `a"b`, "Forwarded": "for=203.0.113.9;proto=http"}},
		{"mapped ipv4", "[::ffff:203.0.113.9]:1", "api.example", false, nil,
			hdr{"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9;proto=http;host=api.example", "X-Real-Ip": "203.0.113.9"}},
		{"trusted", "10.0.0.5:1", "api.example", false,
			hdr{"X-Forwarded-For": "203.0.113.9, 10.1.2.3", "X-Forwarded-Proto": "HTTPS", "X-Forwarded-Host": "shop.example", "Forwarded": `for=203.0.113.9;proto=https, for="10.1.2.3"`},
			hdr{"X-Forwarded-For": "203.0.113.9, 10.1.2.3, 10.0.0.5", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.example",
				"Forwarded": `for=203.0.113.9;proto=https, for="10.1.2.3", for=10.0.0.5;proto=http;host=api.example`, "X-Real-Ip": "203.0.113.9"}},
		{"trusted, its address headers", "10.0.0.5:1", "api.example", false,
			hdr{"X-Forwarded-For": "203.0.113.9", "X-Real-Ip": "198.51.100.7", "True-Client-Ip": "198.51.100.7", "X_Real_Ip": "6.6.6.6"},
			hdr{"X-Forwarded-For": "203.0.113.9, 10.0.0.5", "X-Real-Ip": "198.51.100.7", "True-Client-Ip": "198.51.100.7", "X_real_ip": ""}},
		{"trusted ipv6", "[fd00::5]:1", "api.example", false,
			hdr{"X-Forwarded-For": "2001:db8::7", "Forwarded": `for="[2001:db8::7]:4711"`},
			hdr{"X-Forwarded-For": "2001:db8::7, fd00::5", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "api.example",
				"Forwarded": `for="[2001:db8::7]:4711", for="[fd00::5]";proto=http;host=api.example`, "X-Real-Ip": "2001:db8::7"}},
		{"unparsable peer", "@", "api.example", false, hdr{"X-Real-Ip": "6.6.6.6"},
			hdr{"X-Forwarded-For": "", "Forwarded": "proto=http;host=api.example", "X-Real-Ip": ""}},
	} {
		r := httptest.NewRequest("POST", "/charges", nil)
		r.RemoteAddr, r.Host = c.peer, c.host
		if !c.tls {
			r.TLS = nil
		} else if r.TLS == nil {
			r.TLS = &tls.ConnectionState{}
		}
		for k, v := range c.in {
			r.Header.Set(k, v)
		}
		info := f.inbound(r)
		r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
		out := r.Clone(r.Context())
		for _, name := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			out.Header.Del(name)
		}
		f.rewrite(&httputil.ProxyRequest{In: r, Out: out})
		for k, v := range c.want {
			if got := strings.Join(out.Header.Values(k), " | "); got != v {
				t.Errorf("%s: %s %q, want %q", c.name, k, got, v)
			}
		}
		if id := out.Header.Values("X-Request-Id"); len(id) != 1 || id[0] != info.requestID {
			t.Errorf("%s: X-Request-Id %q, request id %q", c.name, id, info.requestID)
		}
	}
}
