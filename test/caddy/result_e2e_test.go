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
