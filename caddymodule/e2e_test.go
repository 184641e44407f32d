package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/pgtest"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// TestCaddyEndToEnd builds the example Caddy (examples/caddy: standard modules plus
// this one), runs it with a Caddyfile in front of a counting upstream, and checks the
// protocol, the placeholder, a config reload that keeps stored responses, and that
// list-modules shows the modules.
func TestCaddyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	dir := t.TempDir()
	bin := caddyBinary(t)
	short := func(args ...string) ([]byte, error) { return caddyShort(bin, args...) }
	out, err := short("list-modules")
	for _, id := range []string{"http.handlers.idempotency", "http.handlers.idempotency.stores.memory", "http.handlers.idempotency.stores.redis"} {
		if err != nil || !strings.Contains(string(out), id+"\n") {
			t.Fatalf("list-modules lacks %s (err %v):\n%s", id, err, out)
		}
	}

	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int64
		if r.Method == http.MethodPost {
			n = calls.Add(1)
		}
		if r.URL.Path == "/slow" {
			time.Sleep(700 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	defer upstream.Close()
	site, admin := freePort(t), "127.0.0.1:"+freePort(t)
	caddyfile := func(extra string) string {
		return fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
}
:%s {
	idempotency {
		store memory
		lock_ttl 10s
	}
	header ?X-Idempotency-Result {http.idempotency.result}
	%s
	reverse_proxy %s
}
`, admin, site, extra, strings.TrimPrefix(upstream.URL, "http://"))
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfgPath, []byte(caddyfile("")), 0o644)
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("caddy log:\n%s", logs.String())
		}
	}()
	base := "http://127.0.0.1:" + site
	waitHTTP(t, base+"/")

	post := func(path, key, body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	r1, b1 := post("/pay", "e2e", "x")
	r2, b2 := post("/pay", "e2e", "x")
	if r1.StatusCode != 201 || r2.StatusCode != 201 || b1 != b2 || r2.Header.Get("Idempotent-Replayed") != "true" || calls.Load() != 1 {
		t.Fatalf("replay through Caddy: %d %q / %d %q replayed=%q calls=%d", r1.StatusCode, b1, r2.StatusCode, b2, r2.Header.Get("Idempotent-Replayed"), calls.Load())
	}
	if got := r1.Header.Get("X-Idempotency-Result") + "," + r2.Header.Get("X-Idempotency-Result"); got != "executing,replayed" {
		t.Fatalf("result placeholder: %q, want executing,replayed", got)
	}
	if r, _ := post("/pay", "e2e", "other"); r.StatusCode != 422 {
		t.Fatalf("mismatch through Caddy: %d", r.StatusCode)
	}
	done := make(chan int)
	go func() { r, _ := post("/slow", "slow", ""); done <- r.StatusCode }()
	time.Sleep(200 * time.Millisecond)
	if r, _ := post("/slow", "slow", ""); r.StatusCode != 409 {
		t.Fatalf("in flight through Caddy: %d", r.StatusCode)
	}
	if code := <-done; code != 201 {
		t.Fatalf("slow first: %d", code)
	}

	// Reload with a changed config, the memory store's bounds included: the
	// store is kept with its records (a changed bound used to swap in an empty
	// store), so the stored response is still replayed.
	reloaded := strings.Replace(caddyfile("header X-Reloaded yes"), "store memory", "store memory {\n\t\t\tmax_records 5000\n\t\t}", 1)
	os.WriteFile(cfgPath, []byte(reloaded), 0o644)
	if out, err := short("reload", "--config", cfgPath, "--adapter", "caddyfile", "--address", admin); err != nil {
		t.Fatalf("caddy reload: %v\n%s", err, out)
	}
	r3, b3 := post("/pay", "e2e", "x")
	if r3.Header.Get("X-Reloaded") != "yes" {
		t.Fatalf("the reload did not take effect: %v", r3.Header)
	}
	if r3.Header.Get("Idempotent-Replayed") != "true" || b3 != b1 || calls.Load() != 2 {
		t.Fatalf("after reload: replayed=%q body %q calls %d; the stored response must survive", r3.Header.Get("Idempotent-Replayed"), b3, calls.Load())
	}
}

var (
	caddyOnce  sync.Once
	caddyBin   string
	caddyBuild error
)

// caddyBinary builds the example Caddy (standard modules plus this one) once per
// test binary.
func caddyBinary(t *testing.T) string {
	t.Helper()
	caddyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idemproxy-caddy")
		if err != nil {
			caddyBuild = err
			return
		}
		caddyBin = filepath.Join(dir, "caddy")
		if out, err := exec.Command("go", "build", "-o", caddyBin, "../examples/caddy").CombinedOutput(); err != nil {
			caddyBuild = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if caddyBuild != nil {
		t.Fatalf("building Caddy: %v", caddyBuild)
	}
	return caddyBin
}

// caddyShort runs a short-lived Caddy command with a deadline: a hang fails the
// test in a minute rather than holding the package until go test's timeout.
func caddyShort(bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.WaitDelay = 5 * time.Second
	return c.CombinedOutput()
}

// runCaddy runs `caddy run` on the Caddyfile at path until the test ends.
func runCaddy(t *testing.T, bin, dir, path string) *syncLog {
	t.Helper()
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	logs := &syncLog{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("caddy log:\n%s", logs.String())
		}
	})
	return logs
}

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A reload while a first execution runs on a shared store (Redis, PostgreSQL):
// the old config's store stays open until that request is done, so its response
// is stored and the retry replays it. Before, the old config's cleanup closed the
// Redis store under the request, storing failed, and the retry ran the operation
// again.
func TestCaddyReloadWhileRunningOnSharedStores(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	t.Run("redis", func(t *testing.T) { reloadWhileRunning(t, bin, redistest.Start(t).URL()) })
	t.Run("postgres", func(t *testing.T) { reloadWhileRunning(t, bin, "postgres "+pgtest.Start(t).URL()) })
}

func reloadWhileRunning(t *testing.T, bin, store string) {
	dir := t.TempDir()
	var calls atomic.Int64
	started := make(chan struct{}, 4)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // the health poll
		}
		n := calls.Add(1)
		started <- struct{}{}
		time.Sleep(3 * time.Second)
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	defer upstream.Close()
	site, admin := freePort(t), "127.0.0.1:"+freePort(t)
	caddyfile := func(extra string) string {
		return fmt.Sprintf("{\n\tadmin %s\n\tauto_https off\n\tpersist_config off\n}\n:%s {\n\tidempotency {\n\t\tstore %s\n\t\tlock_ttl 2s\n\t}\n\t%s\n\treverse_proxy %s\n}\n",
			admin, site, store, extra, strings.TrimPrefix(upstream.URL, "http://"))
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfgPath, []byte(caddyfile("")), 0o644)
	runCaddy(t, bin, dir, cfgPath)
	base := "http://127.0.0.1:" + site
	waitHTTP(t, base+"/healthz")
	post := func() (*http.Response, string) {
		req, _ := http.NewRequest("POST", base+"/charge", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "reload-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	first := make(chan string, 1)
	go func() { r, b := post(); first <- fmt.Sprint(r.StatusCode, " ", b) }()
	<-started
	os.WriteFile(cfgPath, []byte(caddyfile("header X-Reloaded yes")), 0o644)
	if out, err := caddyShort(bin, "reload", "--config", cfgPath, "--adapter", "caddyfile", "--address", admin); err != nil {
		t.Fatalf("caddy reload: %v\n%s", err, out)
	}
	if got := <-first; got != `201 {"charge":1}` {
		t.Fatalf("first: %s", got)
	}
	time.Sleep(2500 * time.Millisecond) // past the 2s lease: a lock left behind would have lapsed
	r, b := post()
	if r.StatusCode != 201 || r.Header.Get("Idempotent-Replayed") != "true" || b != `{"charge":1}` || calls.Load() != 1 {
		t.Fatalf("retry after a reload: %d %q replayed %q, upstream ran %d times; want a replay of the first",
			r.StatusCode, b, r.Header.Get("Idempotent-Replayed"), calls.Load())
	}
	if r.Header.Get("X-Reloaded") != "yes" {
		t.Fatalf("the reload did not take effect")
	}
}

// freePort is a free loopback port, as Caddyfile sites want it.
func freePort(t *testing.T) string {
	_, port, _ := strings.Cut(testutil.FreeAddr(t), ":")
	return port
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reverse_proxy's failures classified inside real Caddy: an upstream that resets
// after reading the request is held (every retry gets the outcome-unknown answer,
// the upstream runs once); a dial error releases the key (a retry runs when the
// upstream is up).
func TestCaddyUnknownOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	reset := testutil.NewRawUpstream(t, "reset")
	downAddr := testutil.FreeAddr(t)
	base := caddySite(t, fmt.Sprintf("\thandle /held* {\n\t\treverse_proxy %s\n\t}\n\thandle /down* {\n\t\treverse_proxy %s\n\t}\n",
		reset.Addr(), downAddr))
	post := func(p, key string) (int, string, bool) { return postKey(t, base+p, key, "x") }
	for i := range 3 {
		code, body, replayed := post("/held", "h1")
		if code != 502 || !strings.Contains(body, "outcome-unknown") || replayed != (i > 0) {
			t.Fatalf("reset answer %d: %d %q replayed=%v", i, code, body, replayed)
		}
	}
	if n := reset.Count.Load(); n != 1 {
		t.Fatalf("the reset upstream got %d requests, want 1", n)
	}
	if code, body, _ := post("/down", "d1"); code != 502 || strings.Contains(body, "outcome-unknown") {
		t.Fatalf("dial error: %d %q; want Caddy's 502, the key released", code, body)
	}
	up := testutil.NewRawUpstreamAt(t, downAddr, "ok")
	if code, _, replayed := post("/down", "d1"); code != 201 || replayed || up.Count.Load() != 1 {
		t.Fatalf("retry once the upstream is up: %d replayed=%v upstream %d", code, replayed, up.Count.Load())
	}
}

// A reset on a reused keep-alive connection after the upstream read the request,
// inside real Caddy: Go's transport treats a request with an Idempotency-Key
// header as replayable and may re-send it on a new connection, which would run
// it twice below the module. The upstream must see each request once.
func TestCaddyNoTransportResendAfterTheRequestWasWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewRawUpstream(t, "reset-reused")
	base := caddySite(t, fmt.Sprintf("\thandle /charges* {\n\t\treverse_proxy %s\n\t}\n", up.Addr()))
	post := func(key, body string) (int, string) {
		code, b, _ := postKey(t, base+"/charges", key, body)
		return code, b
	}
	if code, body := post("first", "x"); code != 201 {
		t.Fatalf("first request: %d %s", code, body)
	}
	code, body := post("second", "y") // on the reused connection: reset after read
	if n := up.Count.Load(); n != 2 {
		t.Fatalf("the upstream got %d requests, want 2: the reset request was re-sent (%d %s)", n, code, body)
	}
	if code != 502 || !strings.Contains(body, "outcome-unknown") {
		t.Fatalf("reset after read on a reused connection: %d %s, want the held outcome-unknown answer", code, body)
	}
}

// caddySite runs Caddy with one site: the idempotency handler, routes (Caddyfile
// lines), and /healthz; it returns the site's base URL once it answers.
func caddySite(t *testing.T, routes string) string {
	t.Helper()
	bin := caddyBinary(t)
	dir := t.TempDir()
	site, admin := freePort(t), "127.0.0.1:"+freePort(t)
	cfg := fmt.Sprintf("{\n\tadmin %s\n\tauto_https off\n\tpersist_config off\n}\n:%s {\n\tidempotency\n%s\trespond /healthz 200\n}\n",
		admin, site, routes)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	runCaddy(t, bin, dir, path)
	base := "http://127.0.0.1:" + site
	waitHTTP(t, base+"/healthz")
	return base
}

// postKey POSTs body with an Idempotency-Key and returns the status, the body
// and whether the answer was a replay.
func postKey(t *testing.T, url, key, body string) (int, string, bool) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"
}
