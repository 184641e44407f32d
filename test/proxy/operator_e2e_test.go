package proxy_test

import (
	"encoding/json"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// An operator's first minutes with the binary: every listener bound on :0
// and named, as bound, in the start-up line with the routes and trusted
// proxies; the memory store warned about; a variable that overrides the
// mounted file's listen: said so; /readyz on the metrics listener; the
// Dockerfile's HEALTHCHECK command run as the image runs it (a metrics
// address of 0.0.0.0) answers 0 while the instance serves and 1 once it is
// gone; /metrics carries the route label and the Go and process metrics.
func TestE2EOperatorStartupAndProbes(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	cfg := testutil.TempFile(t, "idemproxy.yaml", "listen: 127.0.0.1:1\nupstream: "+up.URL+`
trusted_proxies: [10.0.0.0/8]
routes:
  - path: /charges
  - path: /orders
`)
	p := testutil.Start(t, binary(t), []string{"--config", cfg, "--admin", "127.0.0.1:0", "--metrics", "0.0.0.0:0", "--log-format", "json"},
		"IDEMPROXY_LISTEN=127.0.0.1:0")
	l := p.WaitListening(t)
	for what, addr := range map[string]string{"addr": l.Addr, "admin": l.Admin, "metrics": l.Metrics} {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" || port == "1" {
			t.Errorf("start-up line: %s %q, want the bound address", what, addr)
		}
	}
	if l.Routes != 2 || len(l.TrustedProxies) != 1 || l.TrustedProxies[0] != "10.0.0.0/8" || l.Store != "memory" {
		t.Errorf("start-up line: %+v, want 2 routes, the trusted proxies and the store", l)
	}
	logs := p.Logs.String()
	for _, want := range []string{`"msg":"the memory store is this instance's own`, `"setting":"listen","by":"IDEMPROXY_LISTEN","file":"listen in ` + cfg + ` (line 1)"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %s:\n%s", want, logs)
		}
	}

	_, port, _ := net.SplitHostPort(l.Metrics)
	local := "127.0.0.1:" + port
	if r := testutil.Send(t, local, testutil.Request{Method: "GET", Target: "/readyz"}); r.Status != 200 || !strings.Contains(r.Body, `"ready"`) {
		t.Fatalf("metrics listener /readyz: %d %s", r.Status, r.Body)
	}
	health := dockerHealthcheck(t)
	imageEnv := "IDEMPROXY_METRICS=0.0.0.0:" + port // as the image sets it, the port bound
	if code, out := testutil.Run(t, binary(t), health, imageEnv); code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("HEALTHCHECK %v: exit %d\n%s", health, code, out)
	}

	p.Post(t, "/charges", "m1", "x")
	m := testutil.Send(t, local, testutil.Request{Method: "GET", Target: "/metrics"}).Body
	for _, want := range []string{`idemproxy_requests_total{outcome="stored",route="/charges"} 1`, `idemproxy_requests_total{outcome="stored",route="/orders"} 0`,
		"go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	p.Stop(t)
	if code, out := testutil.Run(t, binary(t), health, imageEnv); code != 1 {
		t.Fatalf("HEALTHCHECK with the instance gone: exit %d, want 1\n%s", code, out)
	}
}

// dockerHealthcheck is the arguments of the Dockerfile's HEALTHCHECK command
// after the binary.
func dockerHealthcheck(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HEALTHCHECK .* CMD (\[.*\])$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Dockerfile has no HEALTHCHECK … CMD [\"/idemproxy\", …] line")
	}
	var cmd []string
	if err := json.Unmarshal(m[1], &cmd); err != nil || len(cmd) < 2 || cmd[0] != "/idemproxy" {
		t.Fatalf("HEALTHCHECK CMD %s: want the exec form running /idemproxy", m[1])
	}
	return cmd[1:]
}

// In an incident nobody has the client's credential: the key_hash a log line
// gives is enough to read, list, release and resolve a held key; fewer digits
// than the logs print are refused; a hash nothing has is not found.
func TestE2EKeysByHash(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+up.Addr())
	const cred = "Bearer cust-7f3a-secret"
	for _, key := range []string{"op-1", "op-2"} {
		if r := p.Post(t, "/charges", key, "x", "Authorization", cred); r.Status != 502 {
			t.Fatalf("holding %s: %d %s", key, r.Status, r.Body)
		}
	}
	var hashes []string
	testutil.Eventually(t, 5e9, "two held keys in the logs", func() bool {
		hashes = regexp.MustCompile(`"msg":"idempotency outcome unknown: the key is held[^\n]*"key_hash":"([0-9a-f]{12})"`).FindAllString(p.Logs.String(), -1)
		return len(hashes) == 2
	})
	for i, line := range hashes {
		hashes[i] = regexp.MustCompile(`"key_hash":"([0-9a-f]{12})"`).FindStringSubmatch(line)[1]
	}
	keys := func(args ...string) (int, string) {
		return runBin(t, append(append([]string{"keys"}, args...), "--admin", p.Admin)...)
	}

	code, out := keys("get", "--hash", hashes[0])
	if code != 0 || !strings.Contains(out, `"unknown_outcome": true`) || !strings.Contains(out, `"key_hash": "`+hashes[0]+`"`) {
		t.Fatalf("keys get --hash: exit %d\n%s", code, out)
	}
	code, out = keys("list", "--held")
	var page struct {
		Held []struct {
			KeyHash string `json:"key_hash"`
			Hash    string `json:"hash"`
			Kind    string `json:"kind"`
			Status  int    `json:"status"`
		} `json:"held"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Held) != 2 {
		t.Fatalf("keys list --held: exit %d\n%s", code, out)
	}
	for _, h := range page.Held {
		if h.Kind != "no_answer" || h.Status != 502 || !strings.HasPrefix(h.Hash, h.KeyHash) || (h.KeyHash != hashes[0] && h.KeyHash != hashes[1]) {
			t.Errorf("held key listed as %+v", h)
		}
	}
	if code, out := keys("list", "--held", "--limit", "1", "--all"); code != 0 || strings.Count(out, `"kind": "no_answer"`) != 2 {
		t.Errorf("keys list --held --all by pages of 1: exit %d\n%s", code, out)
	}

	up.Act.Store("ok")
	if code, out := keys("release", "--hash", hashes[0]); code != 0 || !strings.Contains(out, `"released": true`) {
		t.Fatalf("keys release --hash: exit %d\n%s", code, out)
	}
	code, out = keys("resolve", "--hash", hashes[1], "--status", "201", "--body", `{"id":"ch_9"}`)
	if code != 0 || !strings.Contains(out, `"resolved": true`) {
		t.Fatalf("keys resolve --hash: exit %d\n%s", code, out)
	}
	released := map[string]bool{}
	for _, key := range []string{"op-1", "op-2"} {
		r := p.Post(t, "/charges", key, "x", "Authorization", cred)
		released[key] = r.Status == 201 && !r.Replayed
		if !released[key] && !(r.Status == 201 && r.Replayed && r.Body == `{"id":"ch_9"}`) {
			t.Fatalf("%s after settling: %+v", key, r)
		}
	}
	if len(released) != 2 || released["op-1"] == released["op-2"] {
		t.Fatalf("one key should run again, the other replay the resolution: %v", released)
	}
	if code, out := keys("list", "--held"); code != 0 || !strings.Contains(out, `"held": []`) {
		t.Errorf("keys list --held after settling both: exit %d\n%s", code, out)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"get", "--hash", hashes[0][:8]}, 2, "12 to 64 hex digits"},
		{[]string{"get", "--hash", "zzzzzzzzzzzz"}, 2, "hex digits"},
		{[]string{"get", "--hash", "000000000000"}, 1, "not found"},
		{[]string{"get", "k", "--hash", hashes[0]}, 2, "not both"},
		{[]string{"get", "--hash", hashes[0], "--header", "Authorization: x"}, 2, "--hash names the record alone"},
		{[]string{"list"}, 2, "--held"},
	} {
		if code, out := keys(c.args...); code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("keys %v: exit %d, want %d with %q\n%s", c.args, code, c.code, c.want, out)
		}
	}
	if strings.Contains(p.Logs.String(), "cust-7f3a") {
		t.Fatal("the client's credential was logged")
	}
}

// idemproxy validate checks a configuration as start-up does, without
// contacting its store: 0 for one that starts; 2, with the file, line and
// key, for one that does not, and for a webhook secret that is not set.
func TestE2EValidate(t *testing.T) {
	skipShort(t)
	good := testutil.TempFile(t, "good.yaml", "upstream: http://127.0.0.1:3000\nstore: redis://127.0.0.1:1/0\nroutes:\n  - path: /charges\n    ttl: 2h\n")
	if code, out := runBin(t, "validate", "--config", good); code != 0 || !strings.Contains(out, "valid") {
		t.Fatalf("validate of a good file (its Redis unreachable): exit %d\n%s", code, out)
	}
	for _, c := range []struct{ text, want string }{
		{"upstream: http://127.0.0.1:3000\nroutes:\n  - path: /charges\n    ttl: soon\n", "line 4: routes[0]: ttl"},
		{"upstream: http://127.0.0.1:3000\nlock_tll: 30s\n", `line 2: unknown setting "lock_tll"`},
		{"upstream: http://127.0.0.1:3000\nroutes:\n  - path: /hooks\n    webhook: stripe\n    webhook_secrets: [env:IDEMPROXY_TEST_UNSET]\n", "line 5: routes[0] (/hooks): webhook_secrets: env:IDEMPROXY_TEST_UNSET"},
		{"store: memory\n", "--upstream is required"},
	} {
		bad := testutil.TempFile(t, "bad.yaml", c.text)
		if code, out := runBin(t, "validate", "--config", bad); code != 2 || !strings.Contains(out, c.want) || !strings.Contains(out, "idemproxy validate:") {
			t.Errorf("validate of\n%s: exit %d, want 2 with %q\n%s", c.text, code, c.want, out)
		}
	}
}

// access_log logs a request line for the requests the core does not track
// too, in the shape of the tracked ones; never the key or the credential.
func TestE2EAccessLog(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	untracked := regexp.MustCompile(`"msg":"request"[^\n]*"outcome":"untracked","status":201,"method":"GET","path":"/status"`) // the test upstream answers 201
	for _, on := range []bool{false, true} {
		args := []string{"--upstream", up.URL}
		if on {
			args = append(args, "--access-log")
		}
		p := start(t, args...)
		p.Send(t, testutil.Request{Method: "GET", Target: "/status", Header: testutil.Headers("Authorization", "Bearer acc-secret")})
		p.Post(t, "/charges", "acc-key-1", "x", "Authorization", "Bearer acc-secret")
		testutil.Eventually(t, 5e9, "the tracked request's line", func() bool {
			return strings.Contains(p.Logs.String(), `"outcome":"stored"`)
		})
		p.Stop(t)
		logs := p.Logs.String()
		if got := untracked.MatchString(logs); got != on {
			t.Errorf("access_log %v: an untracked request's line logged = %v\n%s", on, got, logs)
		}
		if strings.Contains(logs, "acc-secret") || strings.Contains(logs, "acc-key-1") {
			t.Errorf("access_log %v: the credential or the key was logged", on)
		}
	}
}
