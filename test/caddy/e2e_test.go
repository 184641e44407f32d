package caddy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
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
	code, out := testutil.Run(t, bin, []string{"list-modules"})
	for _, id := range []string{"http.handlers.idempotency", "http.handlers.idempotency.stores.memory", "http.handlers.idempotency.stores.redis"} {
		if code != 0 || !strings.Contains(out, id+"\n") {
			t.Fatalf("list-modules lacks %s (exit %d):\n%s", id, code, out)
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
	caddyfile := func(extra string) string {
		return fmt.Sprintf(globalOptions(dir)+`:0 {
	idempotency {
		store memory
		lock_ttl 10s
	}
	header ?X-Idempotency-Result {http.idempotency.result}
	%s
	reverse_proxy %s
}
`, extra, strings.TrimPrefix(upstream.URL, "http://"))
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfgPath, []byte(caddyfile("")), 0o644)
	p := runCaddy(t, bin, dir, cfgPath)

	post := func(path, key, body string) testutil.Response {
		return p.Send(t, testutil.Request{Target: path, Key: key, Body: body, Host: testutil.LoadBalancedHost})
	}
	r1 := post("/pay", "e2e", "x")
	r2 := post("/pay", "e2e", "x")
	b1, b2 := r1.Body, r2.Body
	if r1.Status != 201 || r2.Status != 201 || b1 != b2 || r2.Header.Get("Idempotent-Replayed") != "true" || calls.Load() != 1 {
		t.Fatalf("replay through Caddy: %d %q / %d %q replayed=%q calls=%d", r1.Status, b1, r2.Status, b2, r2.Header.Get("Idempotent-Replayed"), calls.Load())
	}
	if got := r1.Header.Get("X-Idempotency-Result") + "," + r2.Header.Get("X-Idempotency-Result"); got != "stored,replayed" {
		t.Fatalf("result placeholder: %q, want stored,replayed", got)
	}
	if r := post("/pay", "e2e", "other"); r.Status != 422 {
		t.Fatalf("mismatch through Caddy: %d", r.Status)
	}
	done := make(chan int)
	go func() { done <- post("/slow", "slow", "").Status }()
	time.Sleep(200 * time.Millisecond)
	if r := post("/slow", "slow", ""); r.Status != 409 {
		t.Fatalf("in flight through Caddy: %d", r.Status)
	}
	if code := <-done; code != 201 {
		t.Fatalf("slow first: %d", code)
	}

	// Reload with a changed config, the memory store's bounds included: the
	// store is kept with its records (a changed bound used to swap in an empty
	// store), so the stored response is still replayed.
	reloaded := strings.Replace(caddyfile("header X-Reloaded yes"), "store memory", "store memory {\n\t\t\tmax_records 5000\n\t\t}", 1)
	os.WriteFile(cfgPath, []byte(reloaded), 0o644)
	reload(t, p, bin, dir, cfgPath)
	r3 := post("/pay", "e2e", "x")
	b3 := r3.Body
	if r3.Header.Get("X-Reloaded") != "yes" {
		t.Fatalf("the reload did not take effect: %v", r3.Header)
	}
	if r3.Header.Get("Idempotent-Replayed") != "true" || b3 != b1 || calls.Load() != 2 {
		t.Fatalf("after reload: replayed=%q body %q calls %d; the stored response must survive", r3.Header.Get("Idempotent-Replayed"), b3, calls.Load())
	}
}

func TestMain(m *testing.M) { testutil.Main(m) }

// caddyBinary is the example Caddy (standard modules plus this one), built once
// for the package.
func caddyBinary(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, "../../examples/caddy")
}

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
	caddyfile := func(extra string) string {
		return fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency {\n\t\tstore %s\n\t\tlock_ttl 2s\n\t}\n\t%s\n\treverse_proxy %s\n}\n",
			store, extra, strings.TrimPrefix(upstream.URL, "http://"))
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfgPath, []byte(caddyfile("")), 0o644)
	p := runCaddy(t, bin, dir, cfgPath)
	post := func() testutil.Response {
		return p.Send(t, testutil.Request{Target: "/charge", Key: "reload-1", Body: "x", Host: testutil.LoadBalancedHost})
	}
	first := make(chan string, 1)
	addr := p.Addr // a reload moves p to the new config's listener
	go func() {
		r, err := testutil.Do(context.Background(), addr, testutil.Request{Target: "/charge", Key: "reload-1", Body: "x", Host: testutil.LoadBalancedHost})
		first <- fmt.Sprint(r.Status, " ", r.Body, err)
	}()
	<-started
	os.WriteFile(cfgPath, []byte(caddyfile("header X-Reloaded yes")), 0o644)
	reload(t, p, bin, dir, cfgPath)
	if got := <-first; got != `201 {"charge":1}<nil>` {
		t.Fatalf("first: %s", got)
	}
	time.Sleep(2500 * time.Millisecond) // past the 2s lease: a claim left behind would have lapsed
	r := post()
	if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" || r.Body != `{"charge":1}` || calls.Load() != 1 {
		t.Fatalf("retry after a reload: %d %q replayed %q, upstream ran %d times; want a replay of the first",
			r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), calls.Load())
	}
	if r.Header.Get("X-Reloaded") != "yes" {
		t.Fatalf("the reload did not take effect")
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
	p := caddySite(t, fmt.Sprintf("\thandle /held* {\n\t\treverse_proxy %s\n\t}\n\thandle /down* {\n\t\treverse_proxy %s\n\t}\n",
		reset.Addr(), downAddr))
	for i := range 3 {
		r := p.Post(t, "/held", "h1", "x")
		if r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") || r.Replayed != (i > 0) {
			t.Fatalf("reset answer %d: %d %q replayed=%v", i, r.Status, r.Body, r.Replayed)
		}
	}
	if n := reset.Count.Load(); n != 1 {
		t.Fatalf("the reset upstream got %d requests, want 1", n)
	}
	if r := p.Post(t, "/down", "d1", "x"); r.Status != 502 || strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("dial error: %d %q; want Caddy's 502, the key released", r.Status, r.Body)
	}
	up := testutil.NewRawUpstreamAt(t, downAddr, "ok")
	if r := p.Post(t, "/down", "d1", "x"); r.Status != 201 || r.Replayed || up.Count.Load() != 1 {
		t.Fatalf("retry once the upstream is up: %d replayed=%v upstream %d", r.Status, r.Replayed, up.Count.Load())
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
	p := caddySite(t, fmt.Sprintf("\thandle /charges* {\n\t\treverse_proxy %s\n\t}\n", up.Addr()))
	if r := p.Post(t, "/charges", "first", "x"); r.Status != 201 {
		t.Fatalf("first request: %d %s", r.Status, r.Body)
	}
	r := p.Post(t, "/charges", "second", "y") // on the reused connection: reset after read
	code, body := r.Status, r.Body
	if n := up.Count.Load(); n != 2 {
		t.Fatalf("the upstream got %d requests, want 2: the reset request was re-sent (%d %s)", n, code, body)
	}
	if code != 502 || !strings.Contains(body, "outcome-unknown") {
		t.Fatalf("reset after read on a reused connection: %d %s, want the held outcome-unknown answer", code, body)
	}
}

// caddySite runs Caddy with one site: the idempotency handler, routes (Caddyfile
// lines), and /healthz; it returns once the site answers.
func caddySite(t *testing.T, routes string) *testutil.Proc {
	t.Helper()
	bin := caddyBinary(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency\n%s\trespond /healthz 200\n}\n",
		routes)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runCaddy(t, bin, dir, path)
}

// Caddy SIGKILLed while a first execution runs on Redis: once its claim lapses,
// the key is held as an unknown outcome (504), as in the proxy: a retry on the
// Caddy that replaces it never runs the operation again.
func TestCaddySigkillHoldsTheKey(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	store := redistest.Start(t).URL()
	var calls atomic.Int64
	started := make(chan struct{}, 4)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		_, _ = io.ReadAll(r.Body)
		if calls.Add(1) > 1 {
			w.WriteHeader(201) // a retry that runs again
			return
		}
		started <- struct{}{}
		<-r.Context().Done() // its Caddy is killed
	}))
	defer upstream.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency {\n\t\tstore %s\n\t\tlock_ttl 1500ms\n\t}\n\trespond /healthz 200\n\treverse_proxy %s\n}\n",
		store, strings.TrimPrefix(upstream.URL, "http://"))), 0o644)
	p := runCaddy(t, bin, dir, cfgPath)
	go func() { _, _ = testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/charge", "kill", "x")) }()
	<-started
	p.Kill()
	q := runCaddy(t, bin, dir, cfgPath)
	saw409 := false
	var r testutil.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = q.Post(t, "/charge", "kill", "x")
		if r.Status != 409 || time.Now().After(deadline) {
			break
		}
		saw409 = true
		time.Sleep(100 * time.Millisecond)
	}
	if !saw409 || r.Status != 504 || !strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("a retry after the killed Caddy's lease lapsed: %d %s (409 seen: %v); want the held outcome-unknown answer", r.Status, r.Body, saw409)
	}
	if r := q.Post(t, "/charge", "kill", "x"); r.Status != 504 || calls.Load() != 1 {
		t.Fatalf("a later retry: %d, upstream ran %d times; want the held answer, one run", r.Status, calls.Load())
	}
}

// A replay carries the first answer's headers exactly, Server included:
// reverse_proxy drops Caddy's own Server header from a proxied answer (the
// upstream here sends none), so its replays have none either; a handler that
// keeps it (respond) has it in the first answer and in its replays. (Before,
// every replay through Caddy carried Server: Caddy, which the soak's
// byte-for-byte check counted on Caddy reload rounds.)
func TestCaddyReplayKeepsTheFirstAnswersServerHeader(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewRawUpstream(t, "answer")
	p := caddySite(t, fmt.Sprintf("\thandle /proxied* {\n\t\treverse_proxy %s\n\t}\n\thandle /responded* {\n\t\trespond \"made\" 201\n\t}\n", up.Addr()))
	for path, want := range map[string]string{"/proxied": "", "/responded": "Caddy"} {
		first := p.Post(t, path, "k"+path, "x")
		again := p.Post(t, path, "k"+path, "x")
		if first.Status != 201 || again.Status != 201 || first.Replayed || !again.Replayed {
			t.Fatalf("%s: %d replayed=%v, then %d replayed=%v", path, first.Status, first.Replayed, again.Status, again.Replayed)
		}
		if got, replayed := first.Header.Get("Server"), again.Header.Get("Server"); got != want || replayed != want {
			t.Errorf("%s: Server %q first, %q replayed; want %q both times", path, got, replayed, want)
		}
	}
}
