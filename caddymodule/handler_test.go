package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// provision builds a handler from JSON in a fresh Caddy context, as Caddy would.
func provision(t *testing.T, cfg string) (*Handler, caddy.Context, context.CancelFunc) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	var h Handler
	if err := json.Unmarshal([]byte(cfg), &h); err != nil {
		t.Fatal(err)
	}
	if err := h.Provision(ctx); err != nil {
		cancel()
		t.Fatalf("Provision: %v", err)
	}
	if err := h.Validate(); err != nil {
		cancel()
		t.Fatalf("Validate: %v", err)
	}
	t.Cleanup(cancel)
	return &h, ctx, cancel
}

type call struct {
	method, key, body string
	header            http.Header
}

type answer struct {
	code   int
	body   string
	header http.Header
	err    error
	result string
}

func serve(h *Handler, c call, next caddyhttp.Handler) answer {
	if c.method == "" {
		c.method = "POST"
	}
	r := httptest.NewRequest(c.method, "http://shop.example/charges", strings.NewReader(c.body))
	if c.key != "" {
		r.Header.Set("Idempotency-Key", c.key)
	}
	for k, v := range c.header {
		r.Header[k] = v
	}
	repl := caddyhttp.NewTestReplacer(r)
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, r, next)
	res, _ := repl.GetString(ResultPlaceholder)
	return answer{w.Code, w.Body.String(), w.Header(), err, res}
}

type counting struct {
	calls atomic.Int64
	fn    func(w http.ResponseWriter, r *http.Request) error
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	c.calls.Add(1)
	if c.fn != nil {
		return c.fn(w, r)
	}
	w.WriteHeader(201)
	_, err := io.WriteString(w, "charged")
	return err
}

// blocking is a counting next whose run closes started, waits for release,
// and answers status.
func blocking(status int) (slow *counting, release, started chan struct{}) {
	release, started = make(chan struct{}), make(chan struct{})
	slow = &counting{fn: func(w http.ResponseWriter, r *http.Request) error {
		close(started)
		<-release
		w.WriteHeader(status)
		return nil
	}}
	return slow, release, started
}

func TestHandlerProtocol(t *testing.T) {
	h, _, _ := provision(t, `{"store":{"type":"memory","max_records":1000}}`)
	next := &counting{}
	a := serve(h, call{key: "k", body: "a"}, next)
	b := serve(h, call{key: "k", body: "a"}, next)
	if a.code != 201 || a.result != "stored" || b.code != 201 || b.header.Get("Idempotent-Replayed") != "true" || b.body != "charged" || b.result != "replayed" {
		t.Fatalf("replay: first %+v second %+v", a, b)
	}
	if c := serve(h, call{key: "k", body: "other"}, next); c.code != 422 || c.result != "mismatch" {
		t.Fatalf("mismatch: %+v", c)
	}
	if c := serve(h, call{method: "GET", key: "k"}, next); c.code != 201 || c.result != "untracked" {
		t.Fatalf("GET passes through: %+v", c)
	}
	if next.calls.Load() != 2 {
		t.Fatalf("calls = %d, want 2", next.calls.Load())
	}

	// 409 while in flight.
	slow, release, started := blocking(200)
	done := make(chan answer)
	go func() { done <- serve(h, call{key: "slow"}, slow) }()
	<-started
	if c := serve(h, call{key: "slow"}, slow); c.code != 409 || c.header.Get("Retry-After") == "" || c.result != "conflict" {
		t.Fatalf("in flight: %+v", c)
	}
	close(release)
	<-done

	// 5xx: not stored, the retry runs.
	fail := &counting{fn: func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(502); return nil }}
	serve(h, call{key: "5xx"}, fail)
	if c := serve(h, call{key: "5xx"}, fail); c.code != 502 || fail.calls.Load() != 2 || c.result != "not_stored" {
		t.Fatalf("5xx: %+v calls %d", c, fail.calls.Load())
	}

	// reverse_proxy could not reach its upstream (a DialError): the error is
	// returned for Caddy's error handling, and the key released.
	boom := caddyhttp.Error(http.StatusBadGateway, reverseproxy.NewDialError(errors.New("dial tcp: connection refused")))
	erring := &counting{fn: func(w http.ResponseWriter, r *http.Request) error { return boom }}
	for i := 0; i < 2; i++ {
		if c := serve(h, call{key: "err"}, erring); !errors.Is(c.err, boom) {
			t.Fatalf("error from next: %+v", c)
		}
	}
	// A 502 from reverse_proxy after the request's headers were written
	// upstream (the transport reports the write through the request's client
	// trace) came after the request was sent: held.
	reset := &counting{fn: func(w http.ResponseWriter, r *http.Request) error {
		httptrace.ContextClientTrace(r.Context()).WroteHeaders()
		return caddyhttp.Error(http.StatusBadGateway, errors.New("read: connection reset by peer"))
	}}
	for i := 0; i < 2; i++ {
		if c := serve(h, call{key: "reset"}, reset); c.err != nil || c.code != 502 || !strings.Contains(c.body, "outcome-unknown") {
			t.Fatalf("reset after the request was sent: %+v", c)
		}
	}
	if reset.calls.Load() != 1 {
		t.Fatalf("reset: calls = %d, want 1 (held)", reset.calls.Load())
	}
	if erring.calls.Load() != 2 {
		t.Fatalf("error from next: calls = %d, want 2 (key released)", erring.calls.Load())
	}
}

func TestHandlerOptionsApply(t *testing.T) {
	h, _, _ := provision(t, `{"require_key":true,"methods":["PUT"],"key_header":"X-Key","scope":["{http.request.header.X-Tenant}"],
		"store_statuses":["2xx"],"max_request_body":4}`)
	next := &counting{}
	if c := serve(h, call{method: "PUT"}, next); c.code != 400 || !strings.Contains(c.body, "missing-key") {
		t.Fatalf("require_key: %+v", c)
	}
	if c := serve(h, call{method: "POST"}, next); c.code != 201 {
		t.Fatalf("POST is not tracked here: %+v", c)
	}
	put := func(tenant, auth, body string) answer {
		return serve(h, call{method: "PUT", body: body, header: http.Header{"X-Key": {"k"}, "X-Tenant": {tenant}, "Authorization": {auth}}}, next)
	}
	put("a", "x", "")
	if c := put("a", "y", ""); c.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("scope is the tenant only: %+v", c)
	}
	if c := put("b", "x", ""); c.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("another tenant got a replay: %+v", c)
	}
	if c := put("c", "x", "12345"); c.code != 413 {
		t.Fatalf("max_request_body: %+v", c)
	}
}

// A config reload provisions the new handler (and store module) before cleaning up
// the old: stored responses and in-flight claims survive.
func TestReloadKeepsStore(t *testing.T) {
	const cfg = `{"store":{"type":"memory","max_records":777}}`
	old, _, cancelOld := provision(t, cfg)
	next := &counting{}
	serve(old, call{key: "kept"}, next)
	slow, release, started := blocking(200)
	done := make(chan answer)
	go func() { done <- serve(old, call{key: "inflight"}, slow) }()
	<-started

	reloaded, _, _ := provision(t, cfg)
	cancelOld() // Caddy cleans up the old config after the new one is running
	if c := serve(reloaded, call{key: "kept"}, next); c.header.Get("Idempotent-Replayed") != "true" || next.calls.Load() != 1 {
		t.Fatalf("stored response lost in reload: %+v", c)
	}
	if c := serve(reloaded, call{key: "inflight"}, slow); c.code != 409 {
		t.Fatalf("in-flight lock lost in reload: %+v", c)
	}
	close(release)
	if c := <-done; c.code != 200 {
		t.Fatalf("in-flight request across reload: %+v", c)
	}
	if c := serve(reloaded, call{key: "inflight"}, slow); c.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("response completed by the old handler not replayed by the new: %+v", c)
	}
}

func TestMetricsCounter(t *testing.T) {
	count := func(outcome string) float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(requests)
		v, err := strconv.ParseFloat(metricstest.Scrape(t, "Caddy", reg).Value(prommetrics.RequestsTotal, "outcome", outcome), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stored := func() float64 { return count("stored") }
	replayed := func() float64 { return count("replayed") }
	s0, r0 := stored(), replayed()
	h, ctx, _ := provision(t, `{}`)
	h2 := new(Handler) // a second handler in the same config shares the counter
	if err := h2.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	serve(h, call{key: "metrics-1"}, next)
	serve(h2, call{key: "metrics-1"}, next)
	if stored()-s0 != 1 || replayed()-r0 != 1 {
		t.Fatalf("stored +%v, replayed +%v; want +1 each", stored()-s0, replayed()-r0)
	}
	// A reload (a new context, a new registry) keeps the counts: Prometheus sees
	// no reset at every config change.
	h3, ctx3, _ := provision(t, `{}`)
	serve(h3, call{key: "metrics-1"}, next)
	got, err := testutil.GatherAndCount(ctx3.GetMetricsRegistry(), prommetrics.RequestsTotal)
	if err != nil || got < 2 || replayed()-r0 != 2 {
		t.Fatalf("after a reload: %d series (%v), replayed +%v; want the counts kept", got, err, replayed()-r0)
	}
}

func TestRedisStoreModule(t *testing.T) {
	srv := redistest.Start(t)
	cfg := `{"store":{"type":"redis","url":"` + srv.URL() + `","prefix":"caddytest:"}}`
	a, _, _ := provision(t, cfg)
	b, _, _ := provision(t, cfg)
	next := &counting{}
	serve(a, call{key: "r"}, next)
	if c := serve(b, call{key: "r"}, next); c.header.Get("Idempotent-Replayed") != "true" || next.calls.Load() != 1 {
		t.Fatalf("second handler on the same Redis: %+v", c)
	}
	if keys, _ := srv.Client().Scan(context.Background(), 0, "caddytest:*", 1000).Val(); len(keys) != 1 {
		t.Fatalf("keys under the prefix: %v", keys)
	}
	// Placeholders in the URL.
	t.Setenv("IDEM_TEST_REDIS", srv.URL())
	c, _, _ := provision(t, `{"store":{"type":"redis","url":"{env.IDEM_TEST_REDIS}","prefix":"caddytest:"}}`)
	if got := serve(c, call{key: "r"}, next); got.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("{env.…} URL: %+v", got)
	}
}

// Redis killed under the Caddy module: once three claims in a row could not
// reach it (through either of two handlers of the one pooled store, whose
// breaker they share), a tracked request gets its 503 in milliseconds from
// both, not after go-redis's dial retries (1.7 s each before); Redis back:
// both serve again.
func TestRedisDownAnswersFast(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server it can stop")
	}
	cfg := `{"store":{"type":"redis","url":"` + srv.URL() + `","prefix":"caddytest:"}}`
	a, _, _ := provision(t, cfg)
	b, _, _ := provision(t, cfg)
	next := &counting{}
	if c := serve(a, call{key: "before"}, next); c.code != 201 {
		t.Fatalf("before: %+v", c)
	}
	srv.Stop()
	for i, h := range []*Handler{a, b, a} {
		if c := serve(h, call{key: fmt.Sprint("opening-", i)}, next); c.code != 503 {
			t.Fatalf("with Redis down: %d", c.code)
		}
	}
	for i := range 10 {
		for _, h := range []*Handler{a, b} {
			began := time.Now()
			c := serve(h, call{key: fmt.Sprint("down-", i)}, next)
			if d := time.Since(began); c.code != 503 || !strings.Contains(c.body, "store-unavailable") || d > 200*time.Millisecond {
				t.Fatalf("with Redis known down: %d after %v; want 503 store-unavailable within milliseconds", c.code, d)
			}
		}
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for serve(b, call{key: fmt.Sprint("back-", time.Now().UnixNano())}, next).code != 201 {
		if time.Now().After(deadline) {
			t.Fatal("not served 10s after Redis came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := serve(a, call{key: "after"}, next); c.code != 201 {
		t.Fatalf("after: %+v", c)
	}
}

// The PostgreSQL store module: two handlers share one table (created at
// provisioning), and a URL from a placeholder works.
func TestPostgresStoreModule(t *testing.T) {
	srv := pgtest.Start(t)
	cfg := `{"store":{"type":"postgres","url":"` + srv.URL() + `","table":"caddy_idem","sweep_interval":0}}`
	a, _, _ := provision(t, cfg)
	b, _, _ := provision(t, cfg)
	next := &counting{}
	serve(a, call{key: "p"}, next)
	if c := serve(b, call{key: "p"}, next); c.header.Get("Idempotent-Replayed") != "true" || next.calls.Load() != 1 {
		t.Fatalf("second handler on the same table: %+v", c)
	}
	var rows int
	if err := srv.Pool().QueryRow(context.Background(), "SELECT count(*) FROM caddy_idem").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("rows in the table: %d (%v), want 1", rows, err)
	}
	t.Setenv("IDEM_TEST_PG", srv.URL())
	c, _, _ := provision(t, `{"store":{"type":"postgres","url":"{env.IDEM_TEST_PG}","table":"caddy_idem"}}`)
	if got := serve(c, call{key: "p"}, next); got.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("{env.…} URL: %+v", got)
	}
}

func TestHandlerWaitAndInFlightOnly(t *testing.T) {
	h, _, _ := provision(t, `{"wait":10000000000}`)
	slow, release, started := blocking(201)
	done := make(chan answer)
	go func() { done <- serve(h, call{key: "w"}, slow) }()
	<-started
	waiter := make(chan answer)
	go func() { waiter <- serve(h, call{key: "w"}, slow) }()
	close(release)
	<-done
	if a := <-waiter; a.code != 201 || a.header.Get("Idempotent-Replayed") != "true" || slow.calls.Load() != 1 {
		t.Fatalf("waiter: %+v, calls %d", a, slow.calls.Load())
	}

	ifo, _, _ := provision(t, `{"in_flight_only":true}`)
	next := &counting{}
	serve(ifo, call{key: "p"}, next)
	if a := serve(ifo, call{key: "p"}, next); a.header.Get("Idempotent-Replayed") != "" || next.calls.Load() != 2 {
		t.Fatalf("in_flight_only stored a result: %+v", a)
	}
}

// handler_timeout 0 means no bound, as in every surface (it used to mean the
// default, 5m, in Caddy alone); unset means the default.
func TestHandlerTimeoutZeroMeansNoBound(t *testing.T) {
	n := 0
	for cfg, wantDeadline := range map[string]bool{
		`{}`:                       true,
		`{"handler_timeout":"0s"}`: false,
		`{"handler_timeout":0}`:    false,
		`{"handler_timeout":"1m"}`: true,
	} {
		h, _, _ := provision(t, cfg)
		var has bool
		next := &counting{fn: func(w http.ResponseWriter, r *http.Request) error {
			_, has = r.Context().Deadline()
			w.WriteHeader(201)
			return nil
		}}
		n++
		if a := serve(h, call{key: fmt.Sprint("timeout-", n)}, next); a.code != 201 || next.calls.Load() != 1 {
			t.Fatalf("%s: %+v", cfg, a)
		}
		if has != wantDeadline {
			t.Errorf("%s: the first execution has a deadline: %v, want %v", cfg, has, wantDeadline)
		}
	}
}

// Caddy provisions, then validates: the handler's settings are compiled once,
// in Provision, and Validate reuses them (before, Validate compiled them a
// second time, reading webhook secrets again).
func TestProvisionAndValidateCompileOnce(t *testing.T) {
	var n atomic.Int64
	prev := compile
	compile = func(c config.Config) (middleware.Settings, error) { n.Add(1); return prev(c) }
	t.Cleanup(func() { compile = prev })
	provision(t, `{"lock_ttl":"10s"}`)
	if got := n.Load(); got != 1 {
		t.Fatalf("Provision and Validate compiled the settings %d times, want 1", got)
	}
}
