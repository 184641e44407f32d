package caddy_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/console"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Caddy's admin API serves the operator console at /idempotency/ui/, the
// same page as idemproxy's admin listener, with its policy (script and style
// of its own only, no framing, no caching); the page calls the endpoints
// beside it (keys, handlers), relative to its address.
func TestCaddyServesTheConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	up := testutil.NewUpstream(t)
	dir := t.TempDir()
	startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tname charges\n\t}\n\treverse_proxy %s\n}\n", strings.TrimPrefix(up.URL, "http://")))
	client := adminClient(dir)
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := client.Get("http://localhost" + path)
		if err != nil {
			t.Fatalf("GET %s on Caddy's admin endpoint: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, c := range []struct{ path, ctype, has string }{
		{"/idempotency/ui/", "text/html; charset=utf-8", `<script src="console.js"`},
		{"/idempotency/ui/console.js", "text/javascript; charset=utf-8", "new URL('../', location.href)"},
		{"/idempotency/ui/console.css", "text/css; charset=utf-8", "dialog"},
	} {
		resp, body := get(c.path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.ctype || !strings.Contains(body, c.has) {
			t.Errorf("GET %s: %d %s %.80q; want 200 %s with %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.ctype, c.has)
			continue
		}
		for k, v := range console.Headers {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("GET %s: %s %q, want %q", c.path, k, got, v)
			}
		}
	}
	if resp, _ := get("/idempotency/ui"); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/idempotency/ui/" {
		t.Errorf("GET /idempotency/ui: %d to %q; want a redirect to /idempotency/ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get("/idempotency/ui/nothing.js"); resp.StatusCode != 404 {
		t.Errorf("GET /idempotency/ui/nothing.js: %d, want 404", resp.StatusCode)
	}
	// What the page calls, relative to /idempotency/ui/.
	for _, path := range []string{"/idempotency/keys?state=held&limit=100", "/idempotency/handlers"} {
		if resp, body := get(path); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
}
