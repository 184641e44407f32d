package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/pgtest"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the end-to-end tests skip themselves; no binary needed
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "idemproxy-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "idemproxy")
	out, err := exec.Command("go", "build", "-race", "-o", binPath, "../cmd/idemproxy").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building idemproxy: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBin runs the binary to completion and returns its exit code and its
// combined output. A run that outlives its deadline is killed and fails the
// test at once, rather than hanging the package until go test's timeout.
func runBin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("idemproxy %s: still running after 60s, killed\n%s", strings.Join(args, " "), out.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	default:
		t.Fatalf("idemproxy %s: %v", strings.Join(args, " "), err)
		return -1, ""
	}
}

// upstream counts executions per Idempotency-Key and answers as the path says:
// /slow?ms=N sleeps, /block waits for release, /fail answers 500.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	perKey  map[string]int
	total   atomic.Int64
	release chan struct{}
	started chan string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{perKey: map[string]int{}, release: make(chan struct{}), started: make(chan string, 100)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key") + r.Header.Get("X-GitHub-Delivery")
		u.mu.Lock()
		u.perKey[key]++
		n := u.perKey[key]
		u.mu.Unlock()
		u.total.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/block":
			u.started <- key
			select {
			case <-u.release:
			case <-r.Context().Done(): // its proxy was killed
				return
			}
		case "/slow":
			var ms int
			fmt.Sscan(r.URL.Query().Get("ms"), &ms)
			u.started <- key
			time.Sleep(time.Duration(ms) * time.Millisecond)
		case "/fail":
			w.WriteHeader(500)
			return
		}
		w.Header().Set("X-Execution", fmt.Sprint(n))
		w.WriteHeader(201)
		fmt.Fprintf(w, "executed %s #%d with %s", key, n, body)
	}))
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.Close()
	})
	return u
}

func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.perKey[key]
}

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	admin  string
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// start runs the binary with --listen and --admin on free ports and waits until
// /healthz answers.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, addr: testutil.FreeAddr(t), admin: testutil.FreeAddr(t), stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(binPath, append([]string{"--listen", p.addr, "--admin", p.admin, "--log-format", "json"}, args...)...)
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("idemproxy log:\n%s", p.stderr)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			return p
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup, which waits for it
			t.Fatalf("idemproxy exited at start: %v\n%s", err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("idemproxy did not come up\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type result struct {
	status   int
	body     string
	replayed bool
	header   http.Header
}

func send(t *testing.T, base, path, key, body string, hdr ...string) result {
	t.Helper()
	r, err := sendErr(context.Background(), base, path, key, body, hdr...)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

func sendErr(ctx context.Context, base, path, key, body string, hdr ...string) (result, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+base+path, strings.NewReader(body))
	// One Host for every instance, as behind a load balancer: the Host is part of
	// a key's scope.
	req.Host = "api.example"
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true", resp.Header}, nil
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped under -short")
	}
}

func TestE2EProtocol(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--ttl", "1s")

	first := send(t, p.addr, "/pay", "k1", "a")
	again := send(t, p.addr, "/pay", "k1", "a")
	if first.status != 201 || first.replayed || !again.replayed || again.body != first.body || again.header.Get("X-Execution") != "1" {
		t.Fatalf("replay: first %+v again %+v", first, again)
	}
	if r := send(t, p.addr, "/pay", "k1", "b"); r.status != 422 || !strings.Contains(r.body, "mismatch") {
		t.Fatalf("mismatch: %+v", r)
	}
	if r := send(t, p.addr, "/pay", "a,b", "a"); r.status != 400 || !strings.Contains(r.body, "invalid-key") {
		t.Fatalf("invalid key: %+v", r)
	}
	// 5xx is not stored: the retry runs again.
	send(t, p.addr, "/fail", "k5", "")
	if r := send(t, p.addr, "/fail", "k5", ""); r.status != 500 || up.count("k5") != 2 {
		t.Fatalf("5xx: %+v, executions %d", r, up.count("k5"))
	}
	// 409 while in flight.
	done := make(chan result)
	go func() { done <- send(t, p.addr, "/block", "k409", "") }()
	<-up.started
	if r := send(t, p.addr, "/block", "k409", ""); r.status != 409 || r.header.Get("Retry-After") == "" {
		t.Fatalf("in flight: %+v", r)
	}
	up.release <- struct{}{}
	if r := <-done; r.status != 201 {
		t.Fatalf("blocked first: %+v", r)
	}
	// TTL expiry: after --ttl the key runs again.
	deadline := time.Now().Add(5 * time.Second)
	for send(t, p.addr, "/pay", "k1", "a").replayed {
		if time.Now().After(deadline) {
			t.Fatal("record did not expire after its 1s TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if up.count("k1") != 2 {
		t.Fatalf("k1 executions = %d, want 2 (once, then once after expiry)", up.count("k1"))
	}
	// Untracked methods pass through.
	resp, err := http.Get("http://" + p.addr + "/pay")
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("GET through the proxy: %v %v", resp, err)
	}
	resp.Body.Close()
	// One JSON log line per tracked request, with outcome and key hash, never the key.
	logs := p.stderr.String()
	for _, want := range []string{`"msg":"request"`, `"outcome":"stored"`, `"outcome":"replayed"`, `"outcome":"conflict"`, `"key_hash":"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, `"k409"`) {
		t.Fatalf("log contains a raw key:\n%s", logs)
	}
}

// A client that sends "Expect: 100-continue" gets exactly one 100 Continue: the
// proxy reads the body to fingerprint it, so the upstream must not be asked for a
// second one (ReverseProxy relays 1xx responses).
func TestE2EExpectContinueOnce(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL)
	for _, key := range []string{"e1", "e1"} { // a first execution, then its replay
		conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", key)
		br := bufio.NewReader(conn)
		line, err := br.ReadString('\n')
		if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
			t.Fatalf("before the body: %q, %v", line, err)
		}
		if blank, err := br.ReadString('\n'); err != nil || blank != "\r\n" {
			t.Fatalf("after 100 Continue: %q, %v", blank, err)
		}
		if _, err := conn.Write([]byte("abc")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 201 || string(body) != "executed e1 #1 with abc" {
			t.Fatalf("after the body: %d %q (a second 100 Continue shows up here)", resp.StatusCode, body)
		}
	}
	if n := up.count("e1"); n != 1 {
		t.Fatalf("upstream ran e1 %d times", n)
	}
}

func TestE2ERequireKeyAndClientHangUp(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--require-key")
	if r := send(t, p.addr, "/pay", "", "x"); r.status != 400 || !strings.Contains(r.body, "missing-key") {
		t.Fatalf("missing key: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := sendErr(ctx, p.addr, "/slow?ms=300", "hang", "x"); errc <- err }()
	<-up.started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("client request was not cancelled")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := send(t, p.addr, "/slow?ms=300", "hang", "x")
		if r.status == 201 {
			if !r.replayed || up.count("hang") != 1 {
				t.Fatalf("retry after hang-up: %+v, executions %d", r, up.count("hang"))
			}
			break
		}
		if r.status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry after hang-up: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestE2EUpstreamDown(t *testing.T) {
	skipShort(t)
	p := start(t, "--upstream", "http://"+testutil.FreeAddr(t))
	for i := 0; i < 2; i++ { // released each time: a retry is a new attempt, not a 409
		if r := send(t, p.addr, "/pay", "down", "x"); r.status != 502 || !strings.Contains(r.body, "upstream-unavailable") {
			t.Fatalf("attempt %d with the upstream down: %+v", i, r)
		}
	}
}

func TestE2ERoutesAndWebhooks(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "idemproxy.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`upstream: %s
routes:
  - path: /webhooks/github
    key_header: X-GitHub-Delivery
    scope_headers: []
  - path: /strict
    require_key: true
  - path: /internal
    enabled: false
  - path: /square
    key_source: json:/idempotency_key
    require_key: true
  - path: /form
    key_source: form:idempotency_key
`, up.URL)), 0o600)
	p := start(t, "--config", cfg)
	// Keys in the body: a JSON field, a form field.
	for i := 0; i < 2; i++ {
		r := send(t, p.addr, "/square/payments", "", `{"idempotency_key":"sq-1","amount":5}`)
		if r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("json key %d: %+v", i, r)
		}
		r = send(t, p.addr, "/form", "", "amount=5&idempotency_key=f-1", "Content-Type", "application/x-www-form-urlencoded")
		if r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("form key %d: %+v", i, r)
		}
	}
	if r := send(t, p.addr, "/square/payments", "", `{"idempotency_key":5}`); r.status != 400 || !strings.Contains(r.body, "a string at /idempotency_key in its JSON body") {
		t.Fatalf("non-string json key, required: %+v", r)
	}
	if r := send(t, p.addr, "/square/payments", "", `{"idempotency_key":"sq-1","amount":6}`); r.status != 422 {
		t.Fatalf("json key reused with another body: %+v", r)
	}
	for i := 0; i < 3; i++ {
		r := send(t, p.addr, "/webhooks/github", "", `{"action":"opened"}`, "X-GitHub-Delivery", "d-1", "Authorization", fmt.Sprint("sig-", i))
		if r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("delivery %d: %+v", i, r)
		}
	}
	if up.count("d-1") != 1 {
		t.Fatalf("webhook executions = %d, want 1", up.count("d-1"))
	}
	if r := send(t, p.addr, "/strict/x", "", ""); r.status != 400 {
		t.Fatalf("/strict without key: %+v", r)
	}
	if r := send(t, p.addr, "/strictly", "", ""); r.status != 201 {
		t.Fatalf("/strictly is not under /strict: %+v", r)
	}
	send(t, p.addr, "/internal/job", "i1", "")
	if r := send(t, p.addr, "/internal/job", "i1", ""); r.replayed || up.count("i1") != 2 {
		t.Fatalf("disabled route: %+v, executions %d", r, up.count("i1"))
	}
}

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

func TestE2EBadStartup(t *testing.T) {
	skipShort(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("upstream: http://x\nttl: [\n"), 0o600)
	// A port this test holds, so --listen on it must fail whoever runs the
	// test (root may bind any port, so a "privileged" port proves nothing).
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	nobody := testutil.FreeAddr(t) // a port nothing listens on
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "--upstream is required"},
		{[]string{"--upstream", "http://x", "--bogus"}, 2, "not defined"},
		{[]string{"--upstream", "http://x", "--store", "redis://" + nobody}, 1, "Redis unreachable"},
		{[]string{"--upstream", "http://x", "--store", "redis://u:hunter2@" + nobody + "/0"}, 1, "xxxxx"},
		{[]string{"--upstream", "http://x", "--store", "redis://h/notadb"}, 2, "database"},
		{[]string{"--config", bad}, 2, "config file"},
		{[]string{"--upstream", "http://x", "--methods", "post"}, 2, "--methods"},
		{[]string{"--upstream", "http://x", "--store-statuses", "2xx,!500,700"}, 2, "--store-statuses"},
		{[]string{"--upstream", "http://x", "--lock-ttl", "0s"}, 2, "--lock-ttl"},
		{[]string{"--upstream", "http://x", "--wait", "5s", "--in-flight-only"}, 2, "--wait"},
		{[]string{"--upstream", "http://x", "--max-body", "10"}, 2, "--max-body"},
		{[]string{"--upstream", "http://x", "--listen", taken.Addr().String()}, 1, "--listen"},
	}
	for _, c := range cases {
		code, out := runBin(t, c.args...)
		s := strings.TrimSpace(out)
		if code != c.code || !strings.Contains(s, c.want) || strings.Contains(s, "goroutine") || strings.Count(s, "\n") > 0 || strings.Contains(s, "hunter2") {
			t.Errorf("%v: exit %d, output %q; want exit %d and one line mentioning %q", c.args, code, s, c.code, c.want)
		}
	}
	if code, out := runBin(t, "--help"); code != 0 || !strings.Contains(out, "IDEMPROXY_UPSTREAM") {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
}

// SIGTERM lets the in-flight request finish and stores its response: a new
// instance on the same Redis replays it.
func TestE2ESigtermDrainsAndStores(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", rs.URL())
	done := make(chan result, 1)
	go func() { done <- send(t, p.addr, "/slow?ms=500", "drain", "x") }()
	<-up.started
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.status != 201 {
		t.Fatalf("in-flight request during SIGTERM: %+v", r)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr)
		}
		p.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("idemproxy did not exit after SIGTERM")
	}
	q := start(t, "--upstream", up.URL, "--store", rs.URL())
	if r := send(t, q.addr, "/slow?ms=500", "drain", "x"); !r.replayed || up.count("drain") != 1 {
		t.Fatalf("after restart: %+v, executions %d", r, up.count("drain"))
	}
}

// SIGKILL mid-flight: the lock outlives the process until its lease lapses; a retry
// gets 409 until then, and runs exactly once after.
func TestE2ESigkillLeaseLapses(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", rs.URL(), "--lock-ttl", "1500ms")
	go func() { _, _ = sendErr(context.Background(), p.addr, "/block", "kill", "x") }()
	<-up.started
	_ = p.cmd.Process.Kill()
	q := start(t, "--upstream", up.URL, "--store", rs.URL(), "--lock-ttl", "1500ms")
	if r := send(t, q.addr, "/pay", "kill", "x"); r.status != 422 {
		// /pay differs from /block: a different request under the same key.
		t.Fatalf("other request, same key: %+v", r)
	}
	stop, exited := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-exited }()
	go func() { // a retry that reaches the upstream is let through at once
		defer close(exited)
		for {
			select {
			case <-up.started:
				select {
				case up.release <- struct{}{}:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}()
	saw409 := false
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := send(t, q.addr, "/slow?ms=0", "kill2", "x") // an unrelated key keeps working
		if r.status != 201 {
			t.Fatalf("unrelated key: %+v", r)
		}
		r = send(t, q.addr, "/block", "kill", "x")
		if r.status == 409 {
			saw409 = true
		}
		if r.status == 201 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !saw409 {
		t.Fatal("no 409 while the killed instance's lease was live")
	}
	if up.count("kill") != 2 {
		t.Fatalf("executions of the killed key = %d, want 2 (the killed one, then one retry)", up.count("kill"))
	}
	if r := send(t, q.addr, "/block", "kill", "x"); !r.replayed {
		t.Fatalf("after the retry ran: %+v", r)
	}
}

// Two instances on one shared store (Redis, PostgreSQL): 200 concurrent
// duplicates across both run once, and both replay it.
func TestE2ETwoProxiesShareAStore(t *testing.T) {
	skipShort(t)
	t.Run("redis", func(t *testing.T) { twoProxies(t, redistest.Start(t).URL()) })
	t.Run("postgres", func(t *testing.T) { twoProxies(t, pgtest.Start(t).URL()) })
}

func twoProxies(t *testing.T, store string) {
	up := newUpstream(t)
	a := start(t, "--upstream", up.URL, "--store", store)
	b := start(t, "--upstream", up.URL, "--store", store)
	const n = 200
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for i := 0; i < n; i++ {
		addr := a.addr
		if i%2 == 1 {
			addr = b.addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := sendErr(context.Background(), addr, "/slow?ms=300", "dup", "x")
			if err != nil {
				codes <- -1
				return
			}
			codes <- r.status
		}()
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if up.count("dup") != 1 || got[201]+got[409] != n || got[201] < 1 {
		t.Fatalf("executions %d, statuses %v; want one execution and only 201/409", up.count("dup"), got)
	}
	for _, p := range []*proc{a, b} {
		if r := send(t, p.addr, "/slow?ms=300", "dup", "x"); !r.replayed {
			t.Fatalf("%s did not replay: %+v", p.addr, r)
		}
	}
}

// PostgreSQL as an operator meets it: with schema creation off, a missing table
// stops start-up with one line naming idemproxy migrate; migrate --apply creates
// it; a duplicate on another instance waits (--wait) for the first, woken by
// LISTEN/NOTIFY across processes, and gets its replay.
func TestE2EPostgresMigrateAndWait(t *testing.T) {
	skipShort(t)
	pg := pgtest.Start(t)
	up := newUpstream(t)
	code, out := runBin(t, "--upstream", up.URL, "--store", pg.URL(), "--postgres-table", "ops.idem", "--postgres-create-schema=false")
	if code != 1 || !strings.Contains(out, "idemproxy migrate") || strings.Count(strings.TrimSpace(out), "\n") > 0 {
		t.Fatalf("start without the table: exit %d, %q; want exit 1 and one line naming idemproxy migrate", code, out)
	}
	if _, err := pg.Pool().Exec(context.Background(), "CREATE SCHEMA ops"); err != nil {
		t.Fatal(err)
	}
	if code, out := runBin(t, "migrate", "--postgres-table", "ops.idem"); code != 0 || !strings.Contains(out, `CREATE TABLE IF NOT EXISTS "ops"."idem"`) {
		t.Fatalf("migrate (print): exit %d: %s", code, out)
	}
	if code, out := runBin(t, "migrate", "--postgres-table", "a;b"); code != 2 {
		t.Fatalf("migrate with a bad table: exit %d: %s; want 2", code, out)
	}
	if code, out := runBin(t, "migrate", "--apply", "--store", pg.URL(), "--postgres-table", "ops.idem"); code != 0 {
		t.Fatalf("migrate --apply: exit %d: %s", code, out)
	}
	flags := []string{"--upstream", up.URL, "--store", pg.URL(), "--postgres-table", "ops.idem", "--postgres-create-schema=false", "--wait", "10s"}
	a, b := start(t, flags...), start(t, flags...)
	first := make(chan result, 1)
	go func() { first <- send(t, a.addr, "/slow?ms=700", "w", "x") }()
	testutil.Eventually(t, 10*time.Second, "the first execution to start", func() bool { return up.count("w") == 1 })
	began := time.Now()
	if r := send(t, b.addr, "/slow?ms=700", "w", "x"); r.status != 201 || !r.replayed {
		t.Fatalf("duplicate on the other instance: %+v, want the first's replay", r)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the waiting duplicate took %v", d)
	}
	if r := <-first; r.status != 201 || up.count("w") != 1 {
		t.Fatalf("first: %+v, upstream ran %d times", r, up.count("w"))
	}
}

func TestE2EWaitAndInFlightOnly(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--wait", "10s")
	done := make(chan result, 1)
	go func() { done <- send(t, p.addr, "/slow?ms=400", "wait", "x") }()
	<-up.started
	if r := send(t, p.addr, "/slow?ms=400", "wait", "x"); r.status != 201 || !r.replayed || up.count("wait") != 1 {
		t.Fatalf("waiting duplicate: %+v, executions %d; want the replay", r, up.count("wait"))
	}
	<-done

	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("upstream: "+up.URL+"\nroutes:\n  - path: /private\n    in_flight_only: true\n"), 0o600)
	q := start(t, "--config", cfg)
	send(t, q.addr, "/private", "ifo", "x")
	if r := send(t, q.addr, "/private", "ifo", "x"); r.replayed || up.count("ifo") != 2 {
		t.Fatalf("in_flight_only route stored a result: %+v", r)
	}
	if r := send(t, q.addr, "/pay", "ifo2", "x"); r.status != 201 {
		t.Fatal(r)
	}
	if r := send(t, q.addr, "/pay", "ifo2", "x"); !r.replayed {
		t.Fatalf("other routes still store: %+v", r)
	}
}

// A route's set field wins over the top level, zero included: wait 0s on a route
// under a top-level wait of 5s answers a duplicate 409 at once.
func TestE2ERouteWaitZero(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "idemproxy.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("upstream: %s\nwait: 5s\nroutes:\n  - path: /block\n    wait: 0s\n", up.URL)), 0o600)
	p := start(t, "--config", cfg)
	first := make(chan result, 1)
	go func() {
		r, _ := sendErr(context.Background(), p.addr, "/block", "w0", "")
		first <- r
	}()
	<-up.started
	// Should the duplicate wait (the bug), release the first after 3s: the
	// duplicate then gets a replay instead of the 409 asserted below.
	safety := time.AfterFunc(3*time.Second, func() { close(up.release) })
	dup := send(t, p.addr, "/block", "w0", "")
	if safety.Stop() {
		close(up.release)
	}
	if dup.status != 409 {
		t.Fatalf("duplicate on a wait: 0s route: %d %s, want an immediate 409", dup.status, dup.body)
	}
	if r := <-first; r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
}

// A path with "..", "." or an empty segment cannot pick one route and reach
// another: /internal/../charges used to match the disabled /internal route and
// reach /charges unprotected, without its required key.
func TestE2ENonCanonicalPaths(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "idemproxy.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("upstream: %s\nroutes:\n  - path: /charges\n    require_key: true\n  - path: /internal\n    enabled: false\n", up.URL)), 0o600)
	p := start(t, "--config", cfg)
	for _, path := range []string{"/internal/../charges", "//charges", "/charges/./", "/internal/%2e%2e/charges", "/charges/x/.."} {
		r := send(t, p.addr, path, "", "")
		if r.status != 400 || !strings.Contains(r.body, "non-canonical-path") {
			t.Errorf("POST %s: %d %s; want 400 non-canonical-path", path, r.status, r.body)
		}
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("%d non-canonical requests reached the upstream", n)
	}
	// Canonical paths, a trailing slash included, are served as before.
	if r := send(t, p.addr, "/charges/", "", ""); r.status != 400 || !strings.Contains(r.body, "missing-key") {
		t.Fatalf("/charges/ without a key: %+v", r)
	}
	if r := send(t, p.addr, "/internal/job", "", ""); r.status != 201 {
		t.Fatalf("/internal/job: %+v", r)
	}
}

// A client that declares a body and stalls holds its connection and its buffer
// only for body_read_timeout, then gets 400; before, it held them forever.
func TestE2ESlowBodyIsCutOff(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--body-read-timeout", "1s")
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: slow\r\nContent-Length: 1000000\r\n\r\n0123456789")
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body within 15s: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || up.total.Load() != 0 {
		t.Fatalf("stalled body: %d, upstream calls %d; want 400 and none", resp.StatusCode, up.total.Load())
	}
	// A key that was never claimed can be used at once.
	if r := send(t, p.addr, "/pay", "slow", "x"); r.status != 201 {
		t.Fatalf("the key after a cut-off body: %+v", r)
	}
}

// The binary refuses a Redis whose maxmemory-policy may evict in-flight locks,
// in one line, unless --redis-allow-eviction accepts it.
func TestE2EEvictingRedisRefused(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("changes the server's configuration")
	}
	if err := srv.Client().ConfigSet(context.Background(), "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	code, out := runBin(t, "--upstream", "http://127.0.0.1:1", "--store", srv.URL(), "--listen", testutil.FreeAddr(t))
	if out = strings.TrimSpace(out); code != 1 || !strings.Contains(out, "maxmemory-policy is volatile-ttl") || strings.Contains(out, "\n") {
		t.Fatalf("exit %d, output %q; want exit 1 and one line naming the policy", code, out)
	}
	p := start(t, "--upstream", "http://127.0.0.1:1", "--store", srv.URL(), "--redis-allow-eviction")
	if !strings.Contains(p.stderr.String(), "eviction allowed by configuration") {
		t.Fatalf("no warning when eviction is allowed:\n%s", p.stderr)
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
