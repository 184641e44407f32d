package proxy_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestE2EAdminAndKeysCommand(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL)
	send(t, p.addr, "/pay", "adm", "x", "Authorization", "Bearer t1")
	send(t, p.addr, "/pay", "adm", "x", "Authorization", "Bearer t1")

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + p.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, "ready") {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	code, metrics := get("/metrics")
	for _, want := range []string{`idemproxy_requests_total{outcome="stored"} 1`, `idemproxy_requests_total{outcome="replayed"} 1`,
		"idemproxy_store_duration_seconds_count 2", "idemproxy_upstream_duration_seconds_count 1", "idemproxy_upstream_in_flight 0",
		"idemproxy_memory_records 1"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	keys := func(args ...string) (int, string) {
		return runBin(t, append([]string{"keys"}, args...)...)
	}
	code, out := keys("get", "adm", "--admin", p.admin, "--host", "api.example", "--header", "Authorization: Bearer t1")
	if code != 0 || !strings.Contains(out, `"state": "completed"`) || !strings.Contains(out, `"status": 201`) {
		t.Fatalf("keys get: exit %d\n%s", code, out)
	}
	if code, out := keys("get", "adm", "--admin", p.admin, "--host", "api.example", "--header", "Authorization: Bearer other"); code != 1 || !strings.Contains(out, "not found") ||
		!strings.Contains(out, `"host": "api.example"`) || !strings.Contains(out, `"Authorization"`) || strings.Contains(out, "Bearer other") {
		t.Fatalf("keys get with another scope: exit %d\n%s", code, out)
	}
	if code, out := keys("delete", "adm", "--admin", p.admin, "--host", "api.example", "--header", "Authorization: Bearer t1"); code != 0 || !strings.Contains(out, `"deleted": true`) {
		t.Fatalf("keys delete: exit %d\n%s", code, out)
	}
	if r := send(t, p.addr, "/pay", "adm", "x", "Authorization", "Bearer t1"); r.replayed || up.count("adm") != 2 {
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
	up := newUpstream(t)
	metrics := testutil.FreeAddr(t)
	p := start(t, "--upstream", up.URL, "--metrics", metrics, "--admin-token", "s3cret")
	send(t, p.addr, "/pay", "tok", "x", "Authorization", "Bearer client")
	get := func(addr, path, auth string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 401, "/readyz": 401, "/keys/tok": 401, "/debug/pprof/": 401} {
		if got := get(p.admin, path, ""); got != want {
			t.Errorf("admin %s without a token: %d, want %d", path, got, want)
		}
		if got := get(p.admin, path, "Bearer wrong"); path != "/healthz" && got != 401 {
			t.Errorf("admin %s with a wrong token: %d", path, got)
		}
	}
	if got := get(p.admin, "/metrics", "Bearer s3cret"); got != 200 {
		t.Errorf("admin /metrics with the token: %d", got)
	}
	if got := get(metrics, "/metrics", ""); got != 200 {
		t.Errorf("metrics listener: %d", got)
	}
	if got := get(metrics, "/keys/tok", ""); got != 404 {
		t.Errorf("the metrics listener serves /keys: %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "keys", "get", "tok", "--admin", p.admin, "--host", "api.example", "--header", "Authorization: Bearer client")
	cmd.Env = append(os.Environ(), "IDEMPROXY_ADMIN_TOKEN=s3cret")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), `"state": "completed"`) {
		t.Fatalf("keys get with the token: %v\n%s", err, out)
	}
	if strings.Contains(p.stderr.String(), "s3cret") {
		t.Fatal("the admin token was logged")
	}
	// An admin listener beyond loopback without a token is warned about.
	_, port, _ := strings.Cut(testutil.FreeAddr(t), ":")
	open := exec.CommandContext(ctx, binPath, "--upstream", up.URL, "--listen", testutil.FreeAddr(t), "--admin", "0.0.0.0:"+port)
	log := &syncBuffer{}
	open.Stderr, open.Stdout = log, log
	if err := open.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { open.Process.Kill(); open.Wait() }()
	testutil.Eventually(t, 10*time.Second, "the warning for an open admin listener", func() bool {
		return strings.Contains(log.String(), "has no token")
	})
}
