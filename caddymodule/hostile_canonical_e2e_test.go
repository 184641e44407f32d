package caddymodule

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

// The hostile-requests findings about how the entrance reads a request, inside
// real Caddy: the method's case, ;parameters and dot segments, the Host's
// spelling on a webhook route, and a header key pre-claiming a webhook id. Each
// was seen failing on 0c84ea5.

type hostileCaddy struct {
	base string
	mu   sync.Mutex
	hits map[string]int // "METHOD path" as the upstream saw it
}

func (h *hostileCaddy) count(k string) int { h.mu.Lock(); defer h.mu.Unlock(); return h.hits[k] }

func (h *hostileCaddy) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.hits {
		n += v
	}
	return n
}

func startHostileCaddy(t *testing.T) *hostileCaddy {
	t.Helper()
	hc := &hostileCaddy{hits: map[string]int{}}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		k := r.Method + " " + r.URL.EscapedPath()
		hc.mu.Lock()
		hc.hits[k]++
		n := hc.hits[k]
		hc.mu.Unlock()
		w.WriteHeader(201)
		fmt.Fprintf(w, "ran %s #%d", k, n)
	}))
	t.Cleanup(up.Close)
	t.Setenv("HOSTILE_STD_SECRET", webhooktest.StandardSecret)
	t.Setenv("HOSTILE_GH_SECRET", "gh-secret")
	dir := t.TempDir()
	site, admin := freePort(t), "127.0.0.1:"+freePort(t)
	cfg := fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
}
:%s {
	route /charges* {
		idempotency {
			require_key
		}
		reverse_proxy %[3]s
	}
	route /notes* {
		idempotency {
			scope_headers
		}
		reverse_proxy %[3]s
	}
	route /webhooks/standard* {
		idempotency {
			webhook standard
			webhook_secrets env:HOSTILE_STD_SECRET
			require_key
			scope_headers
		}
		reverse_proxy %[3]s
	}
	route /webhooks/github* {
		idempotency {
			webhook github
			webhook_secrets env:HOSTILE_GH_SECRET
			require_key
			scope_headers
		}
		reverse_proxy %[3]s
	}
	respond /healthz 200
}
`, admin, site, strings.TrimPrefix(up.URL, "http://"))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	runCaddy(t, caddyBinary(t), dir, path)
	hc.base = "127.0.0.1:" + site
	waitHTTP(t, "http://"+hc.base+"/healthz")
	return hc
}

type hostileAnswer struct {
	status   int
	body     string
	replayed bool
}

func (h *hostileCaddy) do(t *testing.T, method, rawPath, host, body string, hdr map[string]string) hostileAnswer {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+h.base+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = rawPath
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
	return hostileAnswer{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"}
}

func TestCaddyHostileRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	hc := startHostileCaddy(t)

	t.Run("method case", func(t *testing.T) {
		for _, m := range []string{"post", "Post"} {
			if r := hc.do(t, m, "/charges", "api.example", "x", nil); r.status != 400 || !strings.Contains(r.body, "missing-key") {
				t.Errorf("%s /charges without a key: %d %s; want 400 missing-key", m, r.status, r.body)
			}
			if r := hc.do(t, m, "/webhooks/github", "api.example", "{}", nil); r.status != 401 {
				t.Errorf("%s /webhooks/github unsigned: %d %s; want 401", m, r.status, r.body)
			}
		}
		key := map[string]string{"Idempotency-Key": "caddy-lower-1"}
		first := hc.do(t, "post", "/charges", "api.example", "x", key)
		again := hc.do(t, "POST", "/charges", "api.example", "x", key)
		if first.status != 201 || !again.replayed || hc.count("POST /charges") != 1 || hc.count("post /charges") != 0 {
			t.Fatalf("post then POST with one key: %+v / %+v; upstream %v", first, again, hc.hits)
		}
	})

	t.Run("dot segments and parameters", func(t *testing.T) {
		before := hc.total()
		for _, p := range []string{"/charges/..;/x", "/charges/%2e%2e;x=1/x", `/charges\..\x`, "/charges/.;/x"} {
			if r := hc.do(t, "POST", p, "api.example", "x", map[string]string{"Idempotency-Key": "dots"}); r.status != 400 || !strings.Contains(r.body, "non-canonical-path") {
				t.Errorf("POST %s: %d %s; want 400 non-canonical-path", p, r.status, r.body)
			}
		}
		// Caddy's own path matcher reads %2F as a slash: this one never
		// reaches the route, so nothing runs.
		hc.do(t, "POST", "/charges%2F..%2Fx", "api.example", "x", map[string]string{"Idempotency-Key": "dots"})
		if n := hc.total() - before; n != 0 {
			t.Fatalf("%d non-canonical requests reached the upstream: %v", n, hc.hits)
		}
	})

	t.Run("webhook under another Host", func(t *testing.T) {
		body := `{"action":"opened","number":8}`
		h := webhooktest.GitHub("gh-secret", "d-1", body)
		first := hc.do(t, "POST", "/webhooks/github", "api.example", body, h)
		if first.status != 201 || first.replayed {
			t.Fatalf("first delivery: %+v", first)
		}
		for _, host := range []string{"API.example", "api.example:80", "api.example.", "evil.example"} {
			if r := hc.do(t, "POST", "/webhooks/github", host, body, h); !r.replayed || r.body != first.body {
				t.Errorf("the captured delivery under Host %q: %d %q replayed=%v; want the stored answer", host, r.status, r.body, r.replayed)
			}
		}
		if n := hc.count("POST /webhooks/github"); n != 1 {
			t.Fatalf("the delivery ran %d times, want 1", n)
		}
	})

	t.Run("header key cannot pre-claim a webhook id", func(t *testing.T) {
		if r := hc.do(t, "POST", "/notes", "api.example", "junk", map[string]string{"Idempotency-Key": "msg_caddy"}); r.status != 201 {
			t.Fatalf("pre-claim on /notes: %+v", r)
		}
		body := `{"type":"invoice.paid"}`
		r := hc.do(t, "POST", "/webhooks/standard", "api.example", body,
			webhooktest.Standard(webhooktest.StandardSecret, "msg_caddy", time.Now(), body))
		if r.status != 201 || r.replayed || hc.count("POST /webhooks/standard") != 1 {
			t.Fatalf("the genuine delivery after a pre-claim: %+v; want it run once", r)
		}
	})
}
