package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// `idemproxy conformance`, the built command, against the targets
// docs/conformance.md's table names: the proxy on memory and on Redis and the
// Go middleware pass every check; a plain httputil.ReverseProxy in front of
// the demo API fails, and the checks it fails are named. Every target has the
// settings the suite's flags describe: keys required, a 4s TTL (--expiry), a
// 1.5s deadline past which an outcome is unknown (--timeout-path outlives
// it), and a route slow enough to catch in flight (--slow-path).

// conformanceArgs are the flags for a target in front of the demo API's
// routes (the middleware's test API honours the same delay=).
var conformanceArgs = []string{
	"--path", "/charges",
	"--slow-path", "/charges?delay=700ms",
	"--timeout-path", "/charges?delay=5s",
	"--expiry", "4s",
}

// conformanceRun runs the command against target and returns its exit code,
// its output, and each check's status by id, read from the report's lines.
func conformanceRun(t *testing.T, bin, target string) (int, string, map[string]string) {
	t.Helper()
	code, out := testutil.Run(t, bin, append([]string{"conformance", "--target", target}, conformanceArgs...))
	statuses := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == "PASS" || f[0] == "FAIL" || f[0] == "SKIP") {
			statuses[f[1]] = f[0]
		}
	}
	return code, out, statuses
}

// conformancePasses runs the suite against target and fails the test unless
// every check passed and the command exited 0.
func conformancePasses(t *testing.T, target string) {
	t.Helper()
	code, out, statuses := conformanceRun(t, binary(t), target)
	t.Logf("idemproxy conformance --target %s:\n%s", target, out)
	if code != 0 || len(statuses) != 10 || !strings.Contains(out, "\n10 passed, 0 failed: every required check passed\n") {
		t.Fatalf("exit %d, %d checks, want 10 passed and exit 0:\n%s", code, len(statuses), out)
	}
}

// demoAPI starts the demo API and returns its base URL.
func demoAPI(t *testing.T) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	p := testutil.Start(t, testutil.Build(t, "../../examples/demoapi"), []string{"--listen", addr})
	p.WaitHTTP(t, "http://"+addr+"/charges")
	return "http://" + addr
}

// proxyFlags are the proxy's settings the suite's flags describe.
var proxyFlags = []string{"--require-key", "--ttl", "4s", "--upstream-timeout", "1500ms"}

func TestE2EConformanceProxyMemory(t *testing.T) {
	skipShort(t)
	t.Parallel()
	p := start(t, append([]string{"--upstream", demoAPI(t), "--store", "memory"}, proxyFlags...)...)
	conformancePasses(t, "http://"+p.Addr)
}

func TestE2EConformanceProxyRedis(t *testing.T) {
	skipShort(t)
	t.Parallel()
	rs := redistest.Start(t)
	p := start(t, append([]string{"--upstream", demoAPI(t), "--store", rs.URL()}, proxyFlags...)...)
	conformancePasses(t, "http://"+p.Addr)
}

// The Go middleware around a handler that creates a charge per execution
// (after ?delay=, as the demo API), served in this process.
func TestE2EConformanceMiddleware(t *testing.T) {
	skipShort(t)
	t.Parallel()
	var n atomic.Int64
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		id := fmt.Sprintf("ch_%d", n.Add(1))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/charges/"+id)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	})
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := middleware.New(store, func(s *middleware.Settings) {
		s.RequireKey = true
		s.TTL = 4 * time.Second
		s.HandlerTimeout = 1500 * time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Wrap(api))
	t.Cleanup(srv.Close)
	conformancePasses(t, srv.URL)
}

// A plain httputil.ReverseProxy (with a 1.5s ResponseHeaderTimeout, so it
// has a deadline too) in front of the demo API enforces nothing: every check
// that needs the key remembered fails, problem-json has no error answer to
// read, and the command exits 1 naming the failed required checks.
func TestE2EConformanceReverseProxyFails(t *testing.T) {
	skipShort(t)
	t.Parallel()
	u, err := url.Parse(demoAPI(t))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{ResponseHeaderTimeout: 1500 * time.Millisecond}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	code, out, statuses := conformanceRun(t, binary(t), srv.URL)
	t.Logf("idemproxy conformance --target %s:\n%s", srv.URL, out)
	var failed []string
	for _, id := range []string{"replay", "in-flight", "concurrent", "mismatch", "missing-key", "invalid-key",
		"problem-json", "credential-scope", "unknown-outcome", "expiry"} {
		if statuses[id] == "FAIL" {
			failed = append(failed, id)
		}
	}
	want := []string{"replay", "in-flight", "concurrent", "mismatch", "missing-key", "invalid-key",
		"credential-scope", "unknown-outcome", "expiry"}
	if code != 1 || !slices.Equal(failed, want) || statuses["problem-json"] != "SKIP" ||
		!strings.Contains(out, "\n0 passed, 9 failed, 1 skipped: required checks not passed: replay, in-flight, concurrent, mismatch, missing-key, invalid-key, problem-json, credential-scope\n") {
		t.Fatalf("exit %d, failing %v, want exit 1 and %v (problem-json skipped):\n%s", code, failed, want, out)
	}
}
