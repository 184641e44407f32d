package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestE2ERoutesAndWebhooks(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t, testutil.CountBy(testutil.ByHeader("Idempotency-Key", "X-GitHub-Delivery")))
	p := startConfig(t, fmt.Sprintf(`upstream: %s
routes:
  - path: /webhooks/github
    key_header: X-GitHub-Delivery
    scope_headers: []
  - path: /strict
    require_key: true
  - path: /internal
    enabled: false
  - path: /square
    key_source: json:/idempotency_key
    require_key: true
  - path: /form
    key_source: form:idempotency_key
`, up.URL))
	// Keys in the body: a JSON field, a form field.
	for i := 0; i < 2; i++ {
		r := p.Post(t, "/square/payments", "", `{"idempotency_key":"sq-1","amount":5}`)
		if r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("json key %d: %+v", i, r)
		}
		r = p.Post(t, "/form", "", "amount=5&idempotency_key=f-1", "Content-Type", "application/x-www-form-urlencoded")
		if r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("form key %d: %+v", i, r)
		}
	}
	if r := p.Post(t, "/square/payments", "", `{"idempotency_key":5}`); r.Status != 400 || !strings.Contains(r.Body, "a string at /idempotency_key in its JSON body") {
		t.Fatalf("non-string json key, required: %+v", r)
	}
	if r := p.Post(t, "/square/payments", "", `{"idempotency_key":"sq-1","amount":6}`); r.Status != 422 {
		t.Fatalf("json key reused with another body: %+v", r)
	}
	for i := 0; i < 3; i++ {
		r := p.Post(t, "/webhooks/github", "", `{"action":"opened"}`, "X-GitHub-Delivery", "d-1", "Authorization", fmt.Sprint("sig-", i))
		if r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("delivery %d: %+v", i, r)
		}
	}
	if up.Count("d-1") != 1 {
		t.Fatalf("webhook executions = %d, want 1", up.Count("d-1"))
	}
	if r := p.Post(t, "/strict/x", "", ""); r.Status != 400 {
		t.Fatalf("/strict without key: %+v", r)
	}
	if r := p.Post(t, "/strictly", "", ""); r.Status != 201 {
		t.Fatalf("/strictly is not under /strict: %+v", r)
	}
	p.Post(t, "/internal/job", "i1", "")
	if r := p.Post(t, "/internal/job", "i1", ""); r.Replayed || up.Count("i1") != 2 {
		t.Fatalf("disabled route: %+v, executions %d", r, up.Count("i1"))
	}
}

func TestE2EWaitAndInFlightOnly(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--wait", "10s")
	done := make(chan testutil.Response, 1)
	go func() { done <- p.Post(t, "/slow?ms=400", "wait", "x") }()
	<-up.Started
	if r := p.Post(t, "/slow?ms=400", "wait", "x"); r.Status != 201 || !r.Replayed || up.Count("wait") != 1 {
		t.Fatalf("waiting duplicate: %+v, executions %d; want the replay", r, up.Count("wait"))
	}
	<-done

	q := startConfig(t, "upstream: "+up.URL+"\nroutes:\n  - path: /private\n    in_flight_only: true\n")
	q.Post(t, "/private", "ifo", "x")
	if r := q.Post(t, "/private", "ifo", "x"); r.Replayed || up.Count("ifo") != 2 {
		t.Fatalf("in_flight_only route stored a result: %+v", r)
	}
	if r := q.Post(t, "/pay", "ifo2", "x"); r.Status != 201 {
		t.Fatal(r)
	}
	if r := q.Post(t, "/pay", "ifo2", "x"); !r.Replayed {
		t.Fatalf("other routes still store: %+v", r)
	}
}

// A route's set field wins over the top level, zero included: wait 0s on a route
// under a top-level wait of 5s answers a duplicate 409 at once.
func TestE2ERouteWaitZero(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, fmt.Sprintf("upstream: %s\nwait: 5s\nroutes:\n  - path: /block\n    wait: 0s\n", up.URL))
	first := make(chan testutil.Response, 1)
	go func() {
		r, _ := testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/block", "w0", ""))
		first <- r
	}()
	<-up.Started
	// Should the duplicate wait (the bug), release the first after 3s: the
	// duplicate then gets a replay instead of the 409 asserted below.
	safety := time.AfterFunc(3*time.Second, func() { close(up.Release) })
	dup := p.Post(t, "/block", "w0", "")
	if safety.Stop() {
		close(up.Release)
	}
	if dup.Status != 409 {
		t.Fatalf("duplicate on a wait: 0s route: %d %s, want an immediate 409", dup.Status, dup.Body)
	}
	if r := <-first; r.Status != 201 {
		t.Fatalf("first: %+v", r)
	}
}

// A path with "..", "." or an empty segment cannot pick one route and reach
// another: /internal/../charges used to match the disabled /internal route and
// reach /charges untracked, without its required key.
func TestE2ENonCanonicalPaths(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, fmt.Sprintf("upstream: %s\nroutes:\n  - path: /charges\n    require_key: true\n  - path: /internal\n    enabled: false\n", up.URL))
	for _, path := range []string{"/internal/../charges", "//charges", "/charges/./", "/internal/%2e%2e/charges", "/charges/x/.."} {
		r := p.Post(t, path, "", "")
		if r.Status != 400 || !strings.Contains(r.Body, "non-canonical-path") {
			t.Errorf("POST %s: %d %s; want 400 non-canonical-path", path, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d non-canonical requests reached the upstream", n)
	}
	// Canonical paths, a trailing slash included, are served as before.
	if r := p.Post(t, "/charges/", "", ""); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
		t.Fatalf("/charges/ without a key: %+v", r)
	}
	if r := p.Post(t, "/internal/job", "", ""); r.Status != 201 {
		t.Fatalf("/internal/job: %+v", r)
	}
}
