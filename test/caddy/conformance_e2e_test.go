package caddy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// `idemproxy conformance`, the built command, against the module inside real
// Caddy in front of the demo API: every check passes. The site has the
// settings the suite's flags describe: keys required, a 4s TTL (--expiry),
// reverse_proxy's 1.5s response_header_timeout, past which an outcome is
// unknown (--timeout-path outlives it), and the demo API's delay= for a route
// slow enough to catch in flight (--slow-path).
func TestCaddyConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	api := testutil.FreeAddr(t)
	testutil.Start(t, testutil.Build(t, "../../examples/demoapi"), []string{"--listen", api}).
		WaitHTTP(t, "http://"+api+"/charges")
	dir := t.TempDir()
	p := startCaddy(t, caddyBinary(t), dir, fmt.Sprintf(globalOptions(dir)+`:0 {
	idempotency {
		store memory
		require_key
		ttl 4s
	}
	reverse_proxy %s {
		transport http {
			response_header_timeout 1500ms
		}
	}
}
`, api))
	idemproxy := testutil.Build(t, "../../cmd/idemproxy")
	code, out := testutil.Run(t, idemproxy, []string{"conformance", "--target", "http://" + p.Addr,
		"--path", "/charges", "--slow-path", "/charges?delay=700ms", "--timeout-path", "/charges?delay=5s", "--expiry", "4s"})
	t.Logf("idemproxy conformance --target http://%s:\n%s", p.Addr, out)
	if code != 0 || !strings.Contains(out, "\n10 passed, 0 failed: every required check passed\n") {
		t.Fatalf("exit %d, want 10 passed and exit 0:\n%s", code, out)
	}
}
