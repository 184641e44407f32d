package caddy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// examples/caddy/Caddyfile inside real Caddy: X-Idempotency-Result names the
// outcome where the directive runs, and no response carries a literal
// placeholder (before, every request outside /charges*, and a GET inside it,
// got "X-Idempotency-Result: {http.idempotency.result}").
func TestCaddyExampleResultHeader(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewUpstream(t)
	src, err := os.ReadFile("../../examples/caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := strings.NewReplacer(":8443", ":0", "127.0.0.1:2019", adminAddress(dir),
		"127.0.0.1:3000", strings.TrimPrefix(up.URL, "http://")).Replace(string(src))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := runCaddy(t, caddyBinary(t), dir, path)
	for _, c := range []struct {
		q    testutil.Request
		want string // the header's value; "" for none
	}{
		{testutil.Request{Method: "GET", Target: "/charges"}, "untracked"},
		{testutil.Request{Method: "GET", Target: "/"}, ""},
		{testutil.Request{Target: "/refunds", Key: "r1", Body: "{}"}, ""},
		{testutil.Request{Target: "/charges", Key: "c1", Body: "{}"}, "stored"},
		{testutil.Request{Target: "/charges", Key: "c1", Body: "{}"}, "replayed"},
	} {
		r := p.Send(t, c.q)
		for name, values := range r.Header {
			for _, v := range values {
				if strings.Contains(v, "{") {
					t.Errorf("%s %s: %s: %q, a placeholder left unreplaced", c.q.Method, c.q.Target, name, v)
				}
			}
		}
		if got := r.Header.Get("X-Idempotency-Result"); got != c.want {
			t.Errorf("%s %s (key %q): X-Idempotency-Result %q, want %q", c.q.Method, c.q.Target, c.q.Key, got, c.want)
		}
	}
}
