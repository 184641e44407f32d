package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestE2EAdminAndKeysCommand(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL)
	p.Post(t, "/pay", "adm", "x", "Authorization", "Bearer t1")
	p.Post(t, "/pay", "adm", "x", "Authorization", "Bearer t1")

	get := func(path string) (int, string) {
		r := testutil.Send(t, p.Admin, testutil.Request{Method: "GET", Target: path})
		return r.Status, r.Body
	}
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, "ready") {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	code, metrics := get("/metrics")
	for _, want := range []string{`idemproxy_requests_total{outcome="stored",route="(top level)"} 1`, `idemproxy_requests_total{outcome="replayed",route="(top level)"} 1`,
		"idemproxy_store_duration_seconds_count 2", "idemproxy_upstream_duration_seconds_count 1", "idemproxy_upstream_in_flight 0",
		"idemproxy_memory_records 1"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	keys := func(args ...string) (int, string) {
		return runBin(t, append([]string{"keys"}, args...)...)
	}
	code, out := keys("get", "adm", "--admin", p.Admin, "--host", "api.example", "--header", "Authorization: Bearer t1")
	if code != 0 || !strings.Contains(out, `"state": "completed"`) || !strings.Contains(out, `"status": 201`) {
		t.Fatalf("keys get: exit %d\n%s", code, out)
	}
	if code, out := keys("get", "adm", "--admin", p.Admin, "--host", "api.example", "--header", "Authorization: Bearer other"); code != 1 || !strings.Contains(out, "not found") ||
		!strings.Contains(out, `"host": "api.example"`) || !strings.Contains(out, `"Authorization"`) || strings.Contains(out, "Bearer other") {
		t.Fatalf("keys get with another scope: exit %d\n%s", code, out)
	}
	if code, out := keys("delete", "adm", "--admin", p.Admin, "--host", "api.example", "--header", "Authorization: Bearer t1"); code != 0 || !strings.Contains(out, `"deleted": true`) {
		t.Fatalf("keys delete: exit %d\n%s", code, out)
	}
	if r := p.Post(t, "/pay", "adm", "x", "Authorization", "Bearer t1"); r.Replayed || up.Count("adm") != 2 {
		t.Fatalf("after purge the key runs again: %+v", r)
	}
	if code, _ := keys("get"); code != 2 {
		t.Fatalf("keys get without a key: exit %d, want 2", code)
	}
	if code, out := keys("get", "k", "--admin", testutil.FreeAddr(t)); code != 2 || !strings.Contains(out, "admin API") {
		t.Fatalf("keys get with no admin listener: exit %d %s", code, out)
	}
}

// With an admin token, the admin API answers 401 without it (but /healthz), the
// keys command sends it from IDEMPROXY_ADMIN_TOKEN, the metrics listener needs
// none, and an admin bound beyond loopback without a token is warned about.
func TestE2EAdminTokenAndMetricsListener(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--metrics", "127.0.0.1:0", "--admin-token", "s3cret")
	metrics := p.Metrics
	p.Post(t, "/pay", "tok", "x", "Authorization", "Bearer client")
	get := func(addr, path, auth string) int {
		q := testutil.Request{Method: "GET", Target: path}
		if auth != "" {
			q.Header = testutil.Headers("Authorization", auth)
		}
		return testutil.Send(t, addr, q).Status
	}
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 401, "/readyz": 401, "/keys/tok": 401, "/debug/pprof/": 401} {
		if got := get(p.Admin, path, ""); got != want {
			t.Errorf("admin %s without a token: %d, want %d", path, got, want)
		}
		if got := get(p.Admin, path, "Bearer wrong"); path != "/healthz" && got != 401 {
			t.Errorf("admin %s with a wrong token: %d", path, got)
		}
	}
	if got := get(p.Admin, "/metrics", "Bearer s3cret"); got != 200 {
		t.Errorf("admin /metrics with the token: %d", got)
	}
	if got := get(metrics, "/metrics", ""); got != 200 {
		t.Errorf("metrics listener: %d", got)
	}
	if got := get(metrics, "/keys/tok", ""); got != 404 {
		t.Errorf("the metrics listener serves /keys: %d", got)
	}
	code, out := testutil.Run(t, binary(t), []string{"keys", "get", "tok", "--admin", p.Admin, "--host", "api.example", "--header", "Authorization: Bearer client"},
		"IDEMPROXY_ADMIN_TOKEN=s3cret")
	if code != 0 || !strings.Contains(out, `"state": "completed"`) {
		t.Fatalf("keys get with the token: exit %d\n%s", code, out)
	}
	if strings.Contains(p.Logs.String(), "s3cret") {
		t.Fatal("the admin token was logged")
	}
	// An admin listener beyond loopback without a token is warned about.
	open := testutil.Start(t, binary(t), []string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0"})
	testutil.Eventually(t, 10*time.Second, "the warning for an open admin listener", func() bool {
		return strings.Contains(open.Logs.String(), "has no token")
	})
}
