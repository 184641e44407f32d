package caddy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// The hostile-requests findings about how the entrance reads a request, inside
// real Caddy: the method's case, ;parameters and dot segments, the Host's
// spelling on a webhook route, and a header key pre-claiming a webhook id. Each
// was seen failing on 0c84ea5.

// startHostileCaddy runs Caddy with the hostile-requests routes in front of a
// counting upstream: /charges (a key is required), /notes (no scope headers),
// and the Standard Webhooks and GitHub webhook routes.
func startHostileCaddy(t *testing.T) (*testutil.Proc, *testutil.Upstream) {
	t.Helper()
	up := testutil.NewUpstream(t)
	t.Setenv("HOSTILE_STD_SECRET", webhooktest.StandardSecret)
	t.Setenv("HOSTILE_GH_SECRET", "gh-secret")
	dir := t.TempDir()
	cfg := fmt.Sprintf(globalOptions(dir)+`:0 {
	route /charges* {
		idempotency {
			require_key
		}
		reverse_proxy %[1]s
	}
	route /notes* {
		idempotency {
			scope_headers
		}
		reverse_proxy %[1]s
	}
	route /webhooks/standard* {
		idempotency {
			webhook standard
			webhook_secrets env:HOSTILE_STD_SECRET
			require_key
			scope_headers
		}
		reverse_proxy %[1]s
	}
	route /webhooks/github* {
		idempotency {
			webhook github
			webhook_secrets env:HOSTILE_GH_SECRET
			require_key
			scope_headers
		}
		reverse_proxy %[1]s
	}
	respond /healthz 200
}
`, strings.TrimPrefix(up.URL, "http://"))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runCaddy(t, caddyBinary(t), dir, path), up
}

func TestCaddyHostileRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	hc, up := startHostileCaddy(t)

	t.Run("method case", func(t *testing.T) {
		for _, m := range []string{"post", "Post"} {
			if r := hc.Send(t, testutil.Request{Method: m, Target: "/charges", Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
				t.Errorf("%s /charges without a key: %d %s; want 400 missing-key", m, r.Status, r.Body)
			}
			if r := hc.Send(t, testutil.Request{Method: m, Target: "/webhooks/github", Host: "api.example", Body: "{}"}); r.Status != 401 {
				t.Errorf("%s /webhooks/github unsigned: %d %s; want 401", m, r.Status, r.Body)
			}
		}
		key := map[string]string{"Idempotency-Key": "caddy-lower-1"}
		first := hc.Send(t, testutil.Request{Method: "post", Target: "/charges", Host: "api.example", Body: "x", Header: key})
		again := hc.Send(t, testutil.Request{Method: "POST", Target: "/charges", Host: "api.example", Body: "x", Header: key})
		if first.Status != 201 || !again.Replayed || up.Path("POST /charges") != 1 || up.Path("post /charges") != 0 {
			t.Fatalf("post then POST with one key: %+v / %+v; upstream %v", first, again, up.Paths())
		}
	})

	t.Run("dot segments and parameters", func(t *testing.T) {
		before := up.Total()
		for _, p := range []string{"/charges/..;/x", "/charges/%2e%2e;x=1/x", `/charges\..\x`, "/charges/.;/x"} {
			if r := hc.Send(t, testutil.Request{Method: "POST", Target: p, Host: "api.example", Body: "x", Header: map[string]string{"Idempotency-Key": "dots"}}); r.Status != 400 || !strings.Contains(r.Body, "non-canonical-path") {
				t.Errorf("POST %s: %d %s; want 400 non-canonical-path", p, r.Status, r.Body)
			}
		}
		// Caddy's own path matcher reads %2F as a slash: this one never
		// reaches the route, so nothing runs.
		hc.Send(t, testutil.Request{Method: "POST", Target: "/charges%2F..%2Fx", Host: "api.example", Body: "x", Header: map[string]string{"Idempotency-Key": "dots"}})
		if n := up.Total() - before; n != 0 {
			t.Fatalf("%d non-canonical requests reached the upstream: %v", n, up.Paths())
		}
	})

	t.Run("webhook under another Host", func(t *testing.T) {
		body := `{"action":"opened","number":8}`
		h := webhooktest.GitHub("gh-secret", "d-1", body)
		first := hc.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/github", Host: "api.example", Body: body, Header: h})
		if first.Status != 201 || first.Replayed {
			t.Fatalf("first delivery: %+v", first)
		}
		for _, host := range []string{"API.example", "api.example:80", "api.example.", "evil.example"} {
			if r := hc.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/github", Host: host, Body: body, Header: h}); !r.Replayed || r.Body != first.Body {
				t.Errorf("the captured delivery under Host %q: %d %q replayed=%v; want the stored answer", host, r.Status, r.Body, r.Replayed)
			}
		}
		if n := up.Path("POST /webhooks/github"); n != 1 {
			t.Fatalf("the delivery ran %d times, want 1", n)
		}
	})

	t.Run("header key cannot pre-claim a webhook id", func(t *testing.T) {
		if r := hc.Send(t, testutil.Request{Method: "POST", Target: "/notes", Host: "api.example", Body: "junk", Header: map[string]string{"Idempotency-Key": "msg_caddy"}}); r.Status != 201 {
			t.Fatalf("pre-claim on /notes: %+v", r)
		}
		body := `{"type":"invoice.paid"}`
		r := hc.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/standard", Host: "api.example", Body: body, Header: webhooktest.Standard(webhooktest.StandardSecret, "msg_caddy", time.Now(), body)})
		if r.Status != 201 || r.Replayed || up.Path("POST /webhooks/standard") != 1 {
			t.Fatalf("the genuine delivery after a pre-claim: %+v; want it run once", r)
		}
	})
}
