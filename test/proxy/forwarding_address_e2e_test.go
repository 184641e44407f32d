package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// addressHeaders are headers in which a proxy or CDN tells the upstream who
// the client was, as frameworks read them: chi's RealIP (True-Client-IP, then
// X-Real-IP), nginx's realip (X-Real-IP), Rails (Client-IP), gin's trusted
// platforms (CF-Connecting-IP, Fly-Client-IP, X-Appengine-Remote-Addr),
// Akamai and Cloudflare Enterprise (True-Client-IP), Fastly, Azure Front
// Door, Envoy, WebLogic, and the lists of request-ip style helpers.
var addressHeaders = []string{
	"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "CF-Connecting-IPv6", "CF-Pseudo-IPv4",
	"Fastly-Client-IP", "X-Client-IP", "X-Cluster-Client-IP", "X-Originating-IP", "Client-IP",
	"X-Forwarded", "Forwarded-For", "X-Original-Forwarded-For", "Fly-Client-IP", "DO-Connecting-IP",
	"X-Appengine-User-IP", "X-Appengine-Remote-Addr", "X-Azure-ClientIP", "X-Azure-SocketIP",
	"X-Envoy-External-Address", "Proxy-Client-IP", "WL-Proxy-Client-IP", "X-ProxyUser-IP",
	"X-Remote-IP", "X-Remote-Addr", "X-Nf-Client-Connection-Ip", "X-Vercel-Forwarded-For",
	// the X-Forwarded- family beyond For, Proto and Host
	"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Forwarded-Ssl", "X-Forwarded-Client-Cert",
}

// underscored are address headers spelled with underscores, which CGI-style
// servers (PHP, WSGI, Rack) read as the dashed header (HTTP_X_REAL_IP).
var underscored = []string{"X_Real_IP", "X_Forwarded_For", "Client_IP", "True_Client_IP"}

// headerUpstream answers every request with every header it received, as
// JSON.
func headerUpstream(t *testing.T) *testutil.Upstream {
	return testutil.NewUpstream(t, testutil.Reply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
}

func headersSeen(t *testing.T, r testutil.Response) http.Header {
	t.Helper()
	var seen http.Header
	if err := json.Unmarshal([]byte(r.Body), &seen); err != nil {
		t.Fatalf("upstream answer %d %q: %v", r.Status, r.Body, err)
	}
	return seen
}

// forged sends each of names with a value of its own: 198.51.100.N.
func forged(names []string) map[string]string {
	h := map[string]string{}
	for i, name := range names {
		h[name] = fmt.Sprintf("198.51.100.%d", i+1)
	}
	return h
}

// From a peer that is not a trusted proxy, no header that tells who the
// client was reaches the upstream as the client wrote it, whatever its
// spelling: they are removed, and X-Real-IP is the peer.
func TestE2EForwardingUntrustedAddressHeadersRemoved(t *testing.T) {
	skipShort(t)
	up := headerUpstream(t)
	p := start(t, "--upstream", up.URL)
	sent := forged(append(append([]string{}, addressHeaders...), underscored...))
	seen := headersSeen(t, p.Send(t, testutil.Request{Target: "/charges", Key: "a1", Host: "api.example", Body: "x", Header: sent}))
	for name, vals := range seen {
		for _, v := range vals {
			if strings.Contains(v, "198.51.100.") {
				t.Errorf("the upstream got %s: %q, forged by the client", name, v)
			}
		}
	}
	if got := seen.Values("X-Real-Ip"); len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("X-Real-IP %q, want the peer, 127.0.0.1", got)
	}
}

// From a trusted proxy, the address headers it sent are kept as they are; a
// missing or malformed X-Real-IP is the client the proxy worked out (the last
// address of X-Forwarded-For not a trusted proxy's); underscore spellings,
// which no proxy sends, are removed.
func TestE2EForwardingTrustedAddressHeadersKept(t *testing.T) {
	skipShort(t)
	up := headerUpstream(t)
	p := start(t, "--upstream", up.URL, "--trusted-proxies", "127.0.0.0/8")
	sent := forged(addressHeaders)
	for i, name := range underscored {
		sent[name] = fmt.Sprintf("192.0.2.%d", i+1) // told apart from the kept ones
	}
	seen := headersSeen(t, p.Send(t, testutil.Request{Target: "/charges", Key: "t1", Host: "api.example", Body: "x", Header: sent}))
	for _, name := range addressHeaders {
		if got := seen.Values(name); len(got) != 1 || got[0] != sent[name] {
			t.Errorf("a trusted proxy's %s: upstream got %q, want %q", name, got, sent[name])
		}
	}
	for name, vals := range seen {
		for _, v := range vals {
			if strings.HasPrefix(v, "192.0.2.") {
				t.Errorf("the upstream got %s: %q, an underscore spelling", name, v)
			}
		}
	}

	for i, realIP := range []string{"", "not-an-address", "203.0.113.7, 203.0.113.8"} {
		h := map[string]string{"X-Forwarded-For": "203.0.113.9"}
		if realIP != "" {
			h["X-Real-IP"] = realIP
		}
		seen := headersSeen(t, p.Send(t, testutil.Request{Target: "/charges", Key: fmt.Sprintf("t-%d", i), Host: "api.example", Body: "x", Header: h}))
		if got := seen.Values("X-Real-Ip"); len(got) != 1 || got[0] != "203.0.113.9" {
			t.Errorf("a trusted proxy's X-Real-IP %q: upstream got %q, want the client of its X-Forwarded-For, 203.0.113.9", realIP, got)
		}
	}
}
