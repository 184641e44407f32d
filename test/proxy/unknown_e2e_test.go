package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Upstream resets after reading the request: held. The answer and every retry
// are the outcome-unknown problem, the retry is not forwarded, and `keys release`
// lets the next retry run, once.
func TestE2EUnknownOutcomeResetIsHeld(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+up.Addr())
	for i := range 3 {
		r := p.Post(t, "/charges", "u1", "x")
		if r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") || r.Replayed != (i > 0) {
			t.Fatalf("answer %d: %d %s replayed=%v", i, r.Status, r.Body, r.Replayed)
		}
	}
	if n := up.Count.Load(); n != 1 {
		t.Fatalf("upstream got the request %d times, want once", n)
	}
	code, out := runBin(t, "keys", "get", "u1", "--admin", p.Admin, "--host", "api.example")
	if code != 0 || !strings.Contains(out, `"unknown_outcome": true`) {
		t.Fatalf("keys get: %d %s", code, out)
	}
	up.Act.Store("ok")
	if code, out := runBin(t, "keys", "release", "u1", "--admin", p.Admin, "--host", "api.example"); code != 0 || !strings.Contains(out, `"released": true`) {
		t.Fatalf("keys release: %d %s", code, out)
	}
	if r := p.Post(t, "/charges", "u1", "x"); r.Status != 201 || r.Replayed {
		t.Fatalf("after release: %+v", r)
	}
	if r := p.Post(t, "/charges", "u1", "x"); !r.Replayed || up.Count.Load() != 2 {
		t.Fatalf("after the released retry ran: %+v, upstream %d", r, up.Count.Load())
	}
	if code, _ := runBin(t, "keys", "release", "u1", "--admin", p.Admin, "--host", "api.example"); code != 1 {
		t.Fatalf("release of a completed key: exit %d, want 1", code)
	}
}

// An operator who learned what the upstream did resolves the held key with
// that response: every retry is answered it, replayed, and nothing runs again;
// a different payload under the key is 422; the record cannot be resolved
// twice. Bad resolutions are refused with a reason, and the key stays held.
func TestE2EUnknownOutcomeResolve(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+up.Addr())
	if r := p.Post(t, "/charges", "r1", "x"); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("first answer: %d %s", r.Status, r.Body)
	}
	up.Act.Store("ok")
	keys := func(args ...string) (int, string) {
		return runBin(t, append([]string{"keys", "resolve", "r1", "--admin", p.Admin, "--host", "api.example"}, args...)...)
	}
	for _, bad := range [][]string{
		{},                                 // no status
		{"--status", "99"},                 // not a final status
		{"--status", "204", "--body", "x"}, // a 204 has no body
		{"--status", "201", "--body", "a", "--body-file", "f"},
		{"--status", "201", "--response-header", "nocolon"},
	} {
		if code, out := keys(bad...); code != 2 {
			t.Fatalf("keys resolve %v: exit %d, want 2\n%s", bad, code, out)
		}
	}
	if r := p.Post(t, "/charges", "r1", "x"); !strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("a refused resolution changed the record: %d %s", r.Status, r.Body)
	}
	code, out := keys("--status", "201", "--body", `{"id":"ch_42"}`, "--response-header", "Content-Type: application/json",
		"--response-header", "Location: /charges/ch_42")
	if code != 0 || !strings.Contains(out, `"resolved": true`) || !strings.Contains(out, `"status": 201`) {
		t.Fatalf("keys resolve: %d %s", code, out)
	}
	for range 2 {
		r := p.Post(t, "/charges", "r1", "x")
		if r.Status != 201 || !r.Replayed || r.Body != `{"id":"ch_42"}` || r.Header.Get("Location") != "/charges/ch_42" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("retry after resolve: %d replayed=%v %q %v", r.Status, r.Replayed, r.Body, r.Header)
		}
	}
	if r := p.Post(t, "/charges", "r1", "another payload"); r.Status != 422 {
		t.Fatalf("another payload under a resolved key: %d %s", r.Status, r.Body)
	}
	if n := up.Count.Load(); n != 1 {
		t.Fatalf("upstream got the request %d times, want once", n)
	}
	if code, out := keys("--status", "200"); code != 1 || !strings.Contains(out, "not an unknown outcome") {
		t.Fatalf("second resolve: exit %d %s", code, out)
	}
	if code, out := runBin(t, "keys", "resolve", "nobody", "--status", "200", "--admin", p.Admin, "--host", "api.example"); code != 1 || !strings.Contains(out, "not found") {
		t.Fatalf("resolve of a missing key: exit %d %s", code, out)
	}
	if m := metricsOf(t, p.Admin); !strings.Contains(m, "idemproxy_unknown_resolved_total 1") {
		t.Fatalf("metrics do not count the resolution:\n%s", m)
	}
}

// Upstream not listening: the request never left, the key is released, and the
// retry runs once the upstream is up.
func TestE2ENotSentIsReleased(t *testing.T) {
	skipShort(t)
	addr := testutil.FreeAddr(t)
	p := start(t, "--upstream", "http://"+addr)
	if r := p.Post(t, "/charges", "n1", "x"); r.Status != 502 || !strings.Contains(r.Body, "upstream-unavailable") {
		t.Fatalf("upstream down: %d %s", r.Status, r.Body)
	}
	up := testutil.NewRawUpstreamAt(t, addr, "ok")
	if r := p.Post(t, "/charges", "n1", "x"); r.Status != 201 || r.Replayed || up.Count.Load() != 1 {
		t.Fatalf("retry once the upstream is up: %+v (upstream %d)", r, up.Count.Load())
	}
}

// A timeout after the request was sent (handler_timeout) is held, as 504; a
// body cut halfway is held, as 502.
func TestE2EUnknownOutcomeTimeoutAndCutBody(t *testing.T) {
	skipShort(t)
	slow := testutil.NewUpstream(t)
	p := start(t, "--upstream", slow.URL, "--handler-timeout", "500ms")
	for i := range 2 {
		r := p.Post(t, "/slow?ms=3000", "t1", "")
		if r.Status != 504 || !strings.Contains(r.Body, "outcome-unknown") || r.Replayed != (i > 0) {
			t.Fatalf("timeout answer %d: %d %s", i, r.Status, r.Body)
		}
	}
	if n := slow.Count("t1"); n != 1 {
		t.Fatalf("timed-out request forwarded %d times", n)
	}

	cut := testutil.NewRawUpstream(t, "cut")
	q := start(t, "--upstream", "http://"+cut.Addr())
	if _, err := testutil.Do(t.Context(), q.Addr, testutil.KeyedPost("/charges", "c1", "x")); err == nil {
		// The client may or may not see the cut, depending on timing; what
		// matters is the retry below.
		_ = err
	}
	testutil.Eventually(t, 5*time.Second, "the cut response to be settled", func() bool {
		r, err := testutil.Do(t.Context(), q.Addr, testutil.KeyedPost("/charges", "c1", "x"))
		return err == nil && r.Status == 502 && r.Replayed && strings.Contains(r.Body, "outcome-unknown")
	})
	if n := cut.Count.Load(); n != 1 {
		t.Fatalf("cut response: upstream got %d requests, want 1", n)
	}
}

// A reset on a reused keep-alive connection after the upstream read the request:
// Go's transport treats a request with an Idempotency-Key header as replayable and
// would re-send it on a new connection, running it twice below idemproxy. The
// re-send is refused once the request's headers were written: held instead.
func TestE2ENoTransportResendAfterTheRequestWasWritten(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "reset-reused")
	p := start(t, "--upstream", "http://"+up.Addr())
	if r := p.Post(t, "/charges", "first", "x"); r.Status != 201 {
		t.Fatalf("first request: %+v", r)
	}
	r := p.Post(t, "/charges", "second", "y") // on the reused connection: reset after read
	if n := up.Count.Load(); n != 2 {
		t.Fatalf("the upstream got %d requests, want 2: the reset request was re-sent (%d %s)", n, r.Status, r.Body)
	}
	if r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("reset after read on a reused connection: %d %s, want the held outcome-unknown answer", r.Status, r.Body)
	}
	// An empty body is guarded too.
	if r := p.Post(t, "/charges", "third", ""); r.Status != 201 {
		t.Fatalf("third request: %+v", r)
	}
	if r := p.Post(t, "/charges", "fourth", ""); up.Count.Load() != 4 || r.Status != 502 {
		t.Fatalf("empty body, reset on a reused connection: %d, upstream %d, want 502 and 4", r.Status, up.Count.Load())
	}
}

// An upstream whose TLS handshake fails never received the request: the key is
// released, and so it is under Caddy (TestCaddyTLSHandshakeFailureReleases),
// both through forward.Attempt.
func TestE2ETLSHandshakeFailureReleases(t *testing.T) {
	skipShort(t)
	var got atomic.Int64
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(201)
	}))
	defer up.Close()
	p := start(t, "--upstream", up.URL) // its certificate is not trusted
	for i := range 2 {
		r := p.Post(t, "/pay", "tls-1", "x")
		if r.Status != 502 || r.Replayed || !strings.Contains(r.Body, "upstream-unavailable") {
			t.Fatalf("answer %d: %+v; want 502 upstream-unavailable, the key released", i, r)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}
