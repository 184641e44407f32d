package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// The hostile-requests findings about how the entrance reads a request: the
// method's case, the path's case, dot segments and ;parameters, the Host's
// spelling and the key's source. Each case here was seen failing on 0c84ea5.

// hits counts what reached the upstream, by "METHOD path" (the path as the
// upstream received it).
type hits struct {
	*httptest.Server
	mu sync.Mutex
	n  map[string]int
}

func newHits(t *testing.T) *hits {
	h := &hits{n: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.n[r.Method+" "+r.URL.EscapedPath()]++
		n := h.n[r.Method+" "+r.URL.EscapedPath()]
		h.mu.Unlock()
		w.WriteHeader(201)
		fmt.Fprintf(w, "ran %s %s #%d", r.Method, r.URL.EscapedPath(), n)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hits) get(k string) int { h.mu.Lock(); defer h.mu.Unlock(); return h.n[k] }

func (h *hits) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.n {
		n += v
	}
	return n
}

// do sends one request with full control over the method, the raw path, the Host
// and the headers.
func do(t *testing.T, addr, method, rawPath, host, body string, hdr map[string]string) result {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = rawPath // sent byte for byte as the request-target
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawPath, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true", resp.Header}
}

// hostileConfig protects /charges (a key is required), leaves /internal
// unprotected, verifies GitHub and Standard Webhooks deliveries, and has a plain
// /notes route.
func hostileConfig(t *testing.T, upstream string) string {
	cfg := filepath.Join(t.TempDir(), "idemproxy.yaml")
	os.WriteFile(cfg, []byte(`upstream: `+upstream+`
routes:
  - path: /charges
    require_key: true
  - path: /internal
    enabled: false
  - path: /notes
    scope_headers: []
  - path: /webhooks/github
    webhook: github
    webhook_secrets: [env:HOSTILE_GH_SECRET]
    require_key: true
    scope_headers: []
  - path: /webhooks/standard
    webhook: standard
    webhook_secrets: [env:HOSTILE_STD_SECRET]
    require_key: true
    scope_headers: []
`), 0o600)
	t.Setenv("HOSTILE_GH_SECRET", "gh-secret")
	t.Setenv("HOSTILE_STD_SECRET", webhooktest.StandardSecret)
	return cfg
}

// Finding 1: a method in another case is the method. `post` is tracked as POST
// (Flask, Django, Symfony and ASP.NET run it as POST): it needs its key, is
// deduplicated, and is forwarded as POST; a webhook route checks its signature.
func TestHostileMethodCase(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, m := range []string{"post", "Post", "pOST"} {
		if r := do(t, p.addr, m, "/charges", "api.example", "x", nil); r.status != 400 || !strings.Contains(r.body, "missing-key") {
			t.Errorf("%s /charges without a key: %d %s; want 400 missing-key", m, r.status, r.body)
		}
		if r := do(t, p.addr, m, "/webhooks/github", "api.example", "{}", nil); r.status != 401 {
			t.Errorf("%s /webhooks/github unsigned: %d %s; want 401", m, r.status, r.body)
		}
	}
	key := map[string]string{"Idempotency-Key": "lower-1"}
	first := do(t, p.addr, "post", "/charges", "api.example", "x", key)
	again := do(t, p.addr, "POST", "/charges", "api.example", "x", key)
	third := do(t, p.addr, "Post", "/charges", "api.example", "x", key)
	if first.status != 201 || !again.replayed || !third.replayed {
		t.Fatalf("post, POST, Post with one key: %+v / %+v / %+v; want one run, two replays", first, again, third)
	}
	if n := up.total(); n != 1 || up.get("POST /charges") != 1 {
		t.Fatalf("the upstream saw %v; want one POST /charges", up.n)
	}
}

// Finding 2: routes match the path whatever its case (Express, ASP.NET and IIS
// route case-insensitively), so /CHARGES needs its key and /Webhooks/GitHub its
// signature.
func TestHostilePathCase(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, path := range []string{"/CHARGES", "/Charges/ch_1"} {
		if r := do(t, p.addr, "POST", path, "api.example", "x", nil); r.status != 400 || !strings.Contains(r.body, "missing-key") {
			t.Errorf("POST %s without a key: %d %s; want 400 missing-key", path, r.status, r.body)
		}
	}
	for _, path := range []string{"/Webhooks/GitHub", "/WEBHOOKS/standard"} {
		if r := do(t, p.addr, "POST", path, "api.example", "{}", nil); r.status != 401 {
			t.Errorf("POST %s unsigned: %d %s; want 401", path, r.status, r.body)
		}
	}
	if n := up.total(); n != 0 {
		t.Fatalf("%d requests reached the upstream: %v", n, up.n)
	}
}

// Finding 3: ;parameters are not a way around a route (Tomcat, Jetty and Spring
// drop them, and resolve "..;" as ".."), nor is an encoded slash or backslash.
func TestHostilePathParameters(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, path := range []string{"/internal/..;/charges", "/internal/..;x=1/charges", "/internal/.;/../charges",
		"/internal%2F..%2Fcharges", "/internal/%2e%2e;/charges", "/internal%5C..%5Ccharges", `/internal\..\charges`} {
		if r := do(t, p.addr, "POST", path, "api.example", "x", nil); r.status != 400 || !strings.Contains(r.body, "non-canonical-path") {
			t.Errorf("POST %s: %d %s; want 400 non-canonical-path", path, r.status, r.body)
		}
	}
	for _, path := range []string{"/charges;v=1", "/charges;jsessionid=x/ch_1", "/ch%61rges"} {
		if r := do(t, p.addr, "POST", path, "api.example", "x", nil); r.status != 400 || !strings.Contains(r.body, "missing-key") {
			t.Errorf("POST %s without a key: %d %s; want 400 missing-key (the /charges route)", path, r.status, r.body)
		}
	}
	if n := up.total(); n != 0 {
		t.Fatalf("%d requests reached the upstream: %v", n, up.n)
	}
	// The same key for /charges and /ch%61rges is the same request.
	key := map[string]string{"Idempotency-Key": "enc-1"}
	if r := do(t, p.addr, "POST", "/charges", "api.example", "x", key); r.status != 201 {
		t.Fatalf("POST /charges: %+v", r)
	}
	if r := do(t, p.addr, "POST", "/ch%61rges", "api.example", "x", key); !r.replayed {
		t.Fatalf("POST /ch%%61rges with the same key: %+v; want the replay", r)
	}
}

// Finding 4: a captured webhook delivery cannot run again under another Host
// spelling, nor under another Host at all: the Host is not signed.
func TestHostileWebhookHost(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	body := `{"action":"opened","number":7}`
	h := webhooktest.GitHub("gh-secret", "d-1", body)
	h["Content-Type"] = "application/json"
	first := do(t, p.addr, "POST", "/webhooks/github", "api.example", body, h)
	if first.status != 201 || first.replayed {
		t.Fatalf("first delivery: %+v", first)
	}
	for _, host := range []string{"API.example", "api.example:80", "api.example.", "api.example:443", "evil.example", "127.0.0.1"} {
		if r := do(t, p.addr, "POST", "/webhooks/github", host, body, h); !r.replayed || r.body != first.body {
			t.Errorf("the captured delivery under Host %q: %d %q replayed=%v; want the stored answer", host, r.status, r.body, r.replayed)
		}
	}
	if n := up.get("POST /webhooks/github"); n != 1 {
		t.Fatalf("the delivery ran %d times, want 1", n)
	}
}

// A plain route's scope reads the Host in canonical form: the client's retry
// through a load balancer that spells the Host otherwise is still a retry.
func TestHostileHostSpellings(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	key := map[string]string{"Idempotency-Key": "host-1"}
	if r := do(t, p.addr, "POST", "/notes", "api.example", "x", key); r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
	for _, host := range []string{"API.EXAMPLE", "api.example:80", "api.example.", "Api.Example.:443"} {
		if r := do(t, p.addr, "POST", "/notes", host, "x", key); !r.replayed {
			t.Errorf("retry with Host %q: %d %q; want the replay", host, r.status, r.body)
		}
	}
	// Another host is another scope, as before.
	if r := do(t, p.addr, "POST", "/notes", "other.example", "x", key); r.replayed || r.status != 201 {
		t.Errorf("Host other.example: %+v; want its own first execution", r)
	}
	if r := do(t, p.addr, "POST", "/notes", "api..example", "x", key); r.status != 400 || !strings.Contains(r.body, "invalid-host") {
		t.Errorf("Host api..example: %+v; want 400 invalid-host", r)
	}
}

// Finding 6: a header key cannot claim a webhook's id. A plain route used
// Idempotency-Key: msg_X first; the genuine signed delivery msg_X must still run.
func TestHostilePreClaimAcrossRoutes(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	if r := do(t, p.addr, "POST", "/notes", "api.example", "junk", map[string]string{"Idempotency-Key": "msg_X"}); r.status != 201 {
		t.Fatalf("pre-claim on /notes: %+v", r)
	}
	body := `{"type":"invoice.paid"}`
	h := webhooktest.Standard(webhooktest.StandardSecret, "msg_X", time.Now(), body)
	r := do(t, p.addr, "POST", "/webhooks/standard", "api.example", body, h)
	if r.status != 201 || r.replayed {
		t.Fatalf("the genuine delivery msg_X after a pre-claim: %d %s; want it run", r.status, r.body)
	}
	if n := up.get("POST /webhooks/standard"); n != 1 {
		t.Fatalf("the delivery ran %d times, want 1", n)
	}
}

// Finding 5: a signed key is missing only if the signed body lacks it. A form
// key on a webhook route is read from the body whatever its (unsigned)
// Content-Type: the same signed delivery sent as text/plain is the same
// delivery, not a keyless request forwarded again.
func TestHostileUnsignedContentType(t *testing.T) {
	skipShort(t)
	up := newHits(t)
	cfg := filepath.Join(t.TempDir(), "idemproxy.yaml")
	os.WriteFile(cfg, []byte(`upstream: `+up.URL+`
routes:
  - path: /webhooks/acme
    webhook: hmac
    webhook_header: X-Signature
    webhook_secrets: [env:HOSTILE_ACME_SECRET]
    key_source: form:event_id
    scope_headers: []
`), 0o600)
	t.Setenv("HOSTILE_ACME_SECRET", "acme-secret")
	p := start(t, "--config", cfg)
	body := "event_id=ev_5&amount=100"
	sig := webhooktest.HMAC("acme-secret", "X-Signature", "", false, body)
	for i, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "", "application/json", "application/x-www-form-urlencoded; charset=utf-8"} {
		h := map[string]string{"X-Signature": sig["X-Signature"], "Content-Type": ct}
		r := do(t, p.addr, "POST", "/webhooks/acme", "api.example", body, h)
		if r.status != 201 || r.replayed != (i > 0) {
			t.Errorf("the signed delivery as %q: %d %q replayed=%v; want 201, replayed after the first", ct, r.status, r.body, r.replayed)
		}
	}
	if n := up.get("POST /webhooks/acme"); n != 1 {
		t.Fatalf("the delivery ran %d times, want 1", n)
	}
}
