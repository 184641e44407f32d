package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// The hostile-requests findings about how the entrance reads a request: the
// method's case, the path's case, dot segments and ;parameters, the Host's
// spelling and the key's source. Each case here was seen failing on 0c84ea5.

// hostileConfig tracks /charges (a key is required), leaves /internal
// untracked, verifies GitHub and Standard Webhooks deliveries, and has a plain
// /notes route.
func hostileConfig(t *testing.T, upstream string) string {
	cfg := testutil.TempFile(t, "idemproxy.yaml", `upstream: `+upstream+`
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
`)
	t.Setenv("HOSTILE_GH_SECRET", "gh-secret")
	t.Setenv("HOSTILE_STD_SECRET", webhooktest.StandardSecret)
	return cfg
}

// Finding 1: a method in another case is the method. `post` is tracked as POST
// (Flask, Django, Symfony and ASP.NET run it as POST): it needs its key, is
// deduplicated, and is forwarded as POST; a webhook route checks its signature.
func TestHostileMethodCase(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, m := range []string{"post", "Post", "pOST"} {
		if r := p.Send(t, testutil.Request{Method: m, Target: "/charges", Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
			t.Errorf("%s /charges without a key: %d %s; want 400 missing-key", m, r.Status, r.Body)
		}
		if r := p.Send(t, testutil.Request{Method: m, Target: "/webhooks/github", Host: "api.example", Body: "{}"}); r.Status != 401 {
			t.Errorf("%s /webhooks/github unsigned: %d %s; want 401", m, r.Status, r.Body)
		}
	}
	key := map[string]string{"Idempotency-Key": "lower-1"}
	first := p.Send(t, testutil.Request{Method: "post", Target: "/charges", Host: "api.example", Body: "x", Header: key})
	again := p.Send(t, testutil.Request{Method: "POST", Target: "/charges", Host: "api.example", Body: "x", Header: key})
	third := p.Send(t, testutil.Request{Method: "Post", Target: "/charges", Host: "api.example", Body: "x", Header: key})
	if first.Status != 201 || !again.Replayed || !third.Replayed {
		t.Fatalf("post, POST, Post with one key: %+v / %+v / %+v; want one run, two replays", first, again, third)
	}
	if n := up.Total(); n != 1 || up.Path("POST /charges") != 1 {
		t.Fatalf("the upstream saw %v; want one POST /charges", up.Paths())
	}
}

// Finding 2: routes match the path whatever its case (Express, ASP.NET and IIS
// route case-insensitively), so /CHARGES needs its key and /Webhooks/GitHub its
// signature.
func TestHostilePathCase(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, path := range []string{"/CHARGES", "/Charges/ch_1"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
			t.Errorf("POST %s without a key: %d %s; want 400 missing-key", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/Webhooks/GitHub", "/WEBHOOKS/standard"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "{}"}); r.Status != 401 {
			t.Errorf("POST %s unsigned: %d %s; want 401", path, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d requests reached the upstream: %v", n, up.Paths())
	}
}

// Finding 3: ;parameters are not a way around a route (Tomcat, Jetty and Spring
// drop them, and resolve "..;" as ".."), nor is an encoded slash or backslash.
func TestHostilePathParameters(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, path := range []string{"/internal/..;/charges", "/internal/..;x=1/charges", "/internal/.;/../charges",
		"/internal%2F..%2Fcharges", "/internal/%2e%2e;/charges", "/internal%5C..%5Ccharges", `/internal\..\charges`} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "non-canonical-path") {
			t.Errorf("POST %s: %d %s; want 400 non-canonical-path", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/charges;v=1", "/charges;jsessionid=x/ch_1", "/ch%61rges"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
			t.Errorf("POST %s without a key: %d %s; want 400 missing-key (the /charges route)", path, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d requests reached the upstream: %v", n, up.Paths())
	}
	// The same key for /charges and /ch%61rges is the same request.
	key := map[string]string{"Idempotency-Key": "enc-1"}
	if r := p.Send(t, testutil.Request{Method: "POST", Target: "/charges", Host: "api.example", Body: "x", Header: key}); r.Status != 201 {
		t.Fatalf("POST /charges: %+v", r)
	}
	if r := p.Send(t, testutil.Request{Method: "POST", Target: "/ch%61rges", Host: "api.example", Body: "x", Header: key}); !r.Replayed {
		t.Fatalf("POST /ch%%61rges with the same key: %+v; want the replay", r)
	}
}

// Finding 4: a captured webhook delivery cannot run again under another Host
// spelling, nor under another Host at all: the Host is not signed.
func TestHostileWebhookHost(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	body := `{"action":"opened","number":7}`
	h := webhooktest.GitHub("gh-secret", "d-1", body)
	h["Content-Type"] = "application/json"
	first := p.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/github", Host: "api.example", Body: body, Header: h})
	if first.Status != 201 || first.Replayed {
		t.Fatalf("first delivery: %+v", first)
	}
	for _, host := range []string{"API.example", "api.example:80", "api.example.", "api.example:443", "evil.example", "127.0.0.1"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/github", Host: host, Body: body, Header: h}); !r.Replayed || r.Body != first.Body {
			t.Errorf("the captured delivery under Host %q: %d %q replayed=%v; want the stored answer", host, r.Status, r.Body, r.Replayed)
		}
	}
	if n := up.Path("POST /webhooks/github"); n != 1 {
		t.Fatalf("the delivery ran %d times, want 1", n)
	}
}

// A plain route's scope reads the Host in canonical form: the client's retry
// through a load balancer that spells the Host otherwise is still a retry.
func TestHostileHostSpellings(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	key := map[string]string{"Idempotency-Key": "host-1"}
	if r := p.Send(t, testutil.Request{Method: "POST", Target: "/notes", Host: "api.example", Body: "x", Header: key}); r.Status != 201 {
		t.Fatalf("first: %+v", r)
	}
	for _, host := range []string{"API.EXAMPLE", "api.example:80", "api.example.", "Api.Example.:443"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: "/notes", Host: host, Body: "x", Header: key}); !r.Replayed {
			t.Errorf("retry with Host %q: %d %q; want the replay", host, r.Status, r.Body)
		}
	}
	// Another host is another scope, as before.
	if r := p.Send(t, testutil.Request{Method: "POST", Target: "/notes", Host: "other.example", Body: "x", Header: key}); r.Replayed || r.Status != 201 {
		t.Errorf("Host other.example: %+v; want its own first execution", r)
	}
	if r := p.Send(t, testutil.Request{Method: "POST", Target: "/notes", Host: "api..example", Body: "x", Header: key}); r.Status != 400 || !strings.Contains(r.Body, "invalid-host") {
		t.Errorf("Host api..example: %+v; want 400 invalid-host", r)
	}
}

// Finding 6: a header key cannot claim a webhook's id. A plain route used
// Idempotency-Key: msg_X first; the genuine signed delivery msg_X must still run.
func TestHostilePreClaimAcrossRoutes(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	if r := p.Send(t, testutil.Request{Method: "POST", Target: "/notes", Host: "api.example", Body: "junk", Header: map[string]string{"Idempotency-Key": "msg_X"}}); r.Status != 201 {
		t.Fatalf("pre-claim on /notes: %+v", r)
	}
	body := `{"type":"invoice.paid"}`
	h := webhooktest.Standard(webhooktest.StandardSecret, "msg_X", time.Now(), body)
	r := p.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/standard", Host: "api.example", Body: body, Header: h})
	if r.Status != 201 || r.Replayed {
		t.Fatalf("the genuine delivery msg_X after a pre-claim: %d %s; want it run", r.Status, r.Body)
	}
	if n := up.Path("POST /webhooks/standard"); n != 1 {
		t.Fatalf("the delivery ran %d times, want 1", n)
	}
}

// Finding 5: a signed key is missing only if the signed body lacks it. A form
// key on a webhook route is read from the body whatever its (unsigned)
// Content-Type: the same signed delivery sent as text/plain is the same
// delivery, not a keyless request forwarded again.
func TestHostileUnsignedContentType(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	t.Setenv("HOSTILE_ACME_SECRET", "acme-secret")
	p := startConfig(t, `upstream: `+up.URL+`
routes:
  - path: /webhooks/acme
    webhook: hmac
    webhook_header: X-Signature
    webhook_secrets: [env:HOSTILE_ACME_SECRET]
    key_source: form:event_id
    scope_headers: []
`)
	body := "event_id=ev_5&amount=100"
	sig := webhooktest.HMAC("acme-secret", "X-Signature", "", false, body)
	for i, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "", "application/json", "application/x-www-form-urlencoded; charset=utf-8"} {
		h := map[string]string{"X-Signature": sig["X-Signature"], "Content-Type": ct}
		r := p.Send(t, testutil.Request{Method: "POST", Target: "/webhooks/acme", Host: "api.example", Body: body, Header: h})
		if r.Status != 201 || r.Replayed != (i > 0) {
			t.Errorf("the signed delivery as %q: %d %q replayed=%v; want 201, replayed after the first", ct, r.Status, r.Body, r.Replayed)
		}
	}
	if n := up.Path("POST /webhooks/acme"); n != 1 {
		t.Fatalf("the delivery ran %d times, want 1", n)
	}
}
