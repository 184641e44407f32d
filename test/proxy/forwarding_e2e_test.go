package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// echoUpstream answers every request with the Host and forwarding headers it
// received, as JSON.
func echoUpstream(t *testing.T) *testutil.Upstream {
	return testutil.NewUpstream(t, testutil.Reply(func(w http.ResponseWriter, r *http.Request, n int) {
		seen := map[string]string{"Host": r.Host}
		for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", "X-Request-Id"} {
			seen[h] = strings.Join(r.Header.Values(h), " | ")
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(seen)
	}))
}

func seenBy(t *testing.T, r testutil.Response) map[string]string {
	t.Helper()
	var seen map[string]string
	if err := json.Unmarshal([]byte(r.Body), &seen); err != nil {
		t.Fatalf("upstream answer %d %q: %v", r.Status, r.Body, err)
	}
	return seen
}

var spoofed = testutil.Headers(
	"X-Forwarded-For", "203.0.113.9",
	"X-Forwarded-Proto", "https",
	"X-Forwarded-Host", "evil.example",
	"Forwarded", "for=203.0.113.9;proto=https",
	"X-Request-Id", "spoofed-id")

// From a peer that is not a trusted proxy, what it claims is replaced by what
// the proxy saw, and a spoofed X-Forwarded-For changes nothing: not the
// upstream's headers, not the key's scope (even when scope_headers names it),
// not the client address logged.
func TestE2EForwardingUntrustedPeerIsReplaced(t *testing.T) {
	skipShort(t)
	up := echoUpstream(t)
	p := start(t, "--upstream", up.URL, "--scope-headers", "X-Forwarded-For")
	r := p.Send(t, testutil.Request{Target: "/charges", Key: "u1", Host: "api.example", Body: "x", Header: spoofed})
	seen := seenBy(t, r)
	want := map[string]string{
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "api.example",
		"Forwarded": "for=127.0.0.1;proto=http;host=api.example", "Host": strings.TrimPrefix(up.URL, "http://"),
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("upstream got %s %q, want %q", k, seen[k], v)
		}
	}
	if seen["X-Request-Id"] == "" || seen["X-Request-Id"] == "spoofed-id" {
		t.Errorf("request id from an untrusted peer: %q, want a generated one", seen["X-Request-Id"])
	}
	other := testutil.Headers("X-Forwarded-For", "198.51.100.7", "Forwarded", "for=198.51.100.7")
	if r2 := p.Send(t, testutil.Request{Target: "/charges", Key: "u1", Host: "api.example", Body: "x", Header: other}); !r2.Replayed {
		t.Fatalf("a different spoofed X-Forwarded-For changed the key's scope: %+v", r2)
	}
	waitLog(t, p, `"msg":"request"`, 2)
	if strings.Contains(p.Logs.String(), "203.0.113.9") || !strings.Contains(p.Logs.String(), `"client":"127.0.0.1"`) {
		t.Fatalf("the logged client is not the peer:\n%s", p.Logs)
	}
}

// From a trusted proxy, the forwarding headers are kept and extended, the
// client logged is the first untrusted address of the chain, its request id is
// kept; malformed or repeated headers are replaced; upstream_host passes the
// client's Host or a literal one.
func TestE2EForwardingTrustedProxyIsExtended(t *testing.T) {
	skipShort(t)
	up := echoUpstream(t)
	p := start(t, "--upstream", up.URL, "--trusted-proxies", "127.0.0.0/8,10.0.0.0/8", "--upstream-host", "client")
	h := testutil.Headers(
		"X-Forwarded-For", "203.0.113.9, 10.1.2.3",
		"X-Forwarded-Proto", "HTTPS",
		"X-Forwarded-Host", "shop.example",
		"Forwarded", `for=203.0.113.9;proto=https, for="10.1.2.3"`,
		"X-Request-Id", "lb-42")
	seen := seenBy(t, p.Send(t, testutil.Request{Target: "/charges", Key: "t1", Host: "api.example:8443", Body: "x", Header: h}))
	want := map[string]string{
		"X-Forwarded-For": "203.0.113.9, 10.1.2.3, 127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.example",
		"Forwarded":    `for=203.0.113.9;proto=https, for="10.1.2.3", for=127.0.0.1;proto=http;host="api.example:8443"`,
		"Host":         "api.example:8443",
		"X-Request-Id": "lb-42",
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("upstream got %s %q, want %q", k, seen[k], v)
		}
	}
	waitLog(t, p, `"msg":"request"`, 1)
	logs := p.Logs.String()
	if !strings.Contains(logs, `"client":"203.0.113.9"`) || !strings.Contains(logs, `"request_id":"lb-42"`) {
		t.Errorf("request line lacks the client behind the proxy or its request id:\n%s", logs)
	}

	bad := testutil.Headers(
		"X-Forwarded-For", "203.0.113.9, <script>",
		"X-Forwarded-Proto", "gopher",
		"X-Forwarded-Host", "a b/c",
		"Forwarded", `for=203.0.113.9;proto="unterminated`,
		"X-Request-Id", strings.Repeat("x", 500))
	seen = seenBy(t, p.Send(t, testutil.Request{Target: "/charges", Key: "t2", Host: "api.example", Body: "x", Header: bad}))
	want = map[string]string{
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "api.example",
		"Forwarded": "for=127.0.0.1;proto=http;host=api.example",
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("malformed from a trusted proxy: upstream got %s %q, want %q", k, seen[k], v)
		}
	}
	if len(seen["X-Request-Id"]) > 128 {
		t.Errorf("an oversized request id was passed on: %d bytes", len(seen["X-Request-Id"]))
	}

	// Two X-Forwarded-Proto lines: which is right cannot be told; replaced.
	raw := "POST /charges HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: t3\r\nContent-Length: 1\r\n" +
		"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: http\r\nConnection: close\r\n\r\nx"
	seen = seenBy(t, testutil.RawExchange(t, p.Addr, raw))
	if seen["X-Forwarded-For"] != "203.0.113.9, 10.1.2.3, 127.0.0.1" || seen["X-Forwarded-Proto"] != "http" {
		t.Errorf("repeated headers: %v", seen)
	}

	q := start(t, "--upstream", up.URL, "--upstream-host", "internal.api:9000")
	if seen := seenBy(t, q.Post(t, "/charges", "t4", "x")); seen["Host"] != "internal.api:9000" {
		t.Errorf("a literal upstream_host: upstream got Host %q", seen["Host"])
	}
}

// Over IPv6: a trusted ::1 peer extends the chain, and the Forwarded node is
// a quoted, bracketed address.
func TestE2EForwardingIPv6(t *testing.T) {
	skipShort(t)
	up := echoUpstream(t)
	p := start(t, "--upstream", up.URL, "--listen", "[::1]:0", "--trusted-proxies", "::1")
	if !strings.HasPrefix(p.Addr, "[::1]:") {
		t.Fatalf("listening on %s, want [::1]", p.Addr)
	}
	h := testutil.Headers("X-Forwarded-For", "2001:db8::7", "Forwarded", `for="[2001:db8::7]:4711"`)
	seen := seenBy(t, p.Send(t, testutil.Request{Target: "/charges", Key: "v6", Host: "api.example", Body: "x", Header: h}))
	if seen["X-Forwarded-For"] != "2001:db8::7, ::1" || seen["Forwarded"] != `for="[2001:db8::7]:4711", for="[::1]";proto=http;host=api.example` {
		t.Fatalf("IPv6 chain: %v", seen)
	}
	waitLog(t, p, `"client":"2001:db8::7"`, 1) // the client behind an IPv6 proxy
}
