package caddy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// An upstream whose TLS handshake fails never received the request: the key is
// released (Caddy's own 502), as in the proxy, and a retry is not answered with
// a held outcome-unknown. Before, Caddy held it for unknown_hold (24h) while the
// proxy released it.
func TestCaddyTLSHandshakeFailureReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	var got atomic.Int64
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(201)
	}))
	defer up.Close()
	// Caddy does not trust the test server's certificate: the handshake fails.
	p := caddySite(t, fmt.Sprintf("\thandle /tls* {\n\t\treverse_proxy https://%s\n\t}\n", strings.TrimPrefix(up.URL, "https://")))
	for i := range 2 {
		r := p.Post(t, "/tls", "tls-1", "x")
		if r.Status != 502 || r.Replayed || strings.Contains(r.Body, "outcome-unknown") {
			t.Fatalf("answer %d to a request whose TLS handshake failed: %d %q replayed=%v; want Caddy's 502, the key released", i, r.Status, r.Body, r.Replayed)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}
