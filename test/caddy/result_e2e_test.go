package caddy_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// {http.idempotency.result} inside real Caddy says what happened: in a
// header (as the response's headers go out) and in the access log
// (log_append, when the request ended). A first response that is stored reads
// "stored" in both (its header read "executing" before).
func TestCaddyResultPlaceholder(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	dir := t.TempDir()
	p := startCaddy(t, bin, dir, globalOptions(dir)+":0 {\n\tlog\n\tlog_append result {http.idempotency.result}\n\tidempotency\n"+
		"\theader ?X-Idempotency-Result {http.idempotency.result}\n\trespond /fail* 500\n\trespond /charges* `{\"id\":1}` 201\n}\n")
	for _, c := range []struct {
		what          string
		q             testutil.Request
		header, final string
	}{
		{"a first request, stored", testutil.KeyedPost("/charges", "k1", "x"), "stored", "stored"},
		{"its retry", testutil.KeyedPost("/charges", "k1", "x"), "replayed", "replayed"},
		{"the key reused", testutil.KeyedPost("/charges", "k1", "y"), "mismatch", "mismatch"},
		{"a first request answered 500", testutil.KeyedPost("/fail", "k2", "x"), "not_stored", "not_stored"},
		{"no key", testutil.Request{Target: "/charges", Body: "x"}, "bypass", "bypass"},
		{"an untracked method", testutil.Request{Method: "GET", Target: "/charges"}, "untracked", "untracked"},
	} {
		before := len(accessLogResults(p))
		r := p.Send(t, c.q)
		if got := r.Header.Get("X-Idempotency-Result"); got != c.header {
			t.Errorf("%s: the header reads %q, want %q", c.what, got, c.header)
		}
		var final string
		testutil.Eventually(t, 10*time.Second, "the access log line", func() bool {
			lines := accessLogResults(p)
			if len(lines) <= before {
				return false
			}
			final = lines[len(lines)-1]
			return true
		})
		if final != c.final {
			t.Errorf("%s: the access log reads %q, want %q", c.what, final, c.final)
		}
	}
	if n := len(accessLogResults(p)); n != 6 {
		t.Errorf("%d access log lines, want 6", n)
	}
}

// accessLogResults are the result fields of Caddy's access log lines, in order.
func accessLogResults(p *testutil.Proc) []string {
	var out []string
	for _, line := range strings.Split(p.Logs.String(), "\n") {
		var entry struct {
			Logger string `json:"logger"`
			Result string `json:"result"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && strings.HasPrefix(entry.Logger, "http.log.access") {
			out = append(out, entry.Result)
		}
	}
	return out
}

// A first execution that ended in the core's own deadline (handler_timeout),
// or in reverse_proxy's (response_header_timeout, after the request was
// sent), is answered 504 outcome-unknown by the handler and held: the result
// reads "unknown" in the header and in the access log. Before, the header
// read "executing", which the docs say it never does once headers go out.
func TestCaddyResultPlaceholderOnTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	up := testutil.NewUpstream(t)
	for _, c := range []struct{ what, key, idempotency, proxy string }{
		{"handler_timeout", "k-handler", "idempotency {\n\t\thandler_timeout 1s\n\t}", "reverse_proxy " + up.Listener.Addr().String()},
		{"reverse_proxy's response_header_timeout", "k-proxy", "idempotency", "reverse_proxy " + up.Listener.Addr().String() + " {\n\t\ttransport http {\n\t\t\tresponse_header_timeout 1s\n\t\t}\n\t}"},
	} {
		t.Run(c.what, func(t *testing.T) {
			dir := t.TempDir()
			p := startCaddy(t, bin, dir, globalOptions(dir)+":0 {\n\tlog\n\tlog_append result {http.idempotency.result}\n\t"+c.idempotency+
				"\n\theader ?X-Idempotency-Result {http.idempotency.result}\n\t"+c.proxy+"\n}\n")
			r := p.Post(t, "/slow?ms=3000", c.key, "x")
			if r.Status != 504 || !strings.Contains(r.Body, "outcome-unknown") {
				t.Fatalf("%d %s; want the 504 outcome-unknown answer", r.Status, r.Body)
			}
			if got := r.Header.Get("X-Idempotency-Result"); got != "unknown" {
				t.Errorf("the header reads %q, want %q", got, "unknown")
			}
			var lines []string
			testutil.Eventually(t, 10*time.Second, "the access log line", func() bool {
				lines = accessLogResults(p)
				return len(lines) > 0
			})
			if lines[0] != "unknown" {
				t.Errorf("the access log reads %q, want %q", lines[0], "unknown")
			}
		})
	}
}
