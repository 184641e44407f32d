package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/tracing/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// reconcileUpstream executes POST /charges and resets the connection the
// first time it sees a key (an unknown outcome), answering 201 after; it
// answers GET /lookup?key=K by K's prefix: "done" 200 with the charge,
// "nf" 404, "err" 500, "hang" never (until the caller gives up), "flip" 500
// until flip is called, then as "done". It counts both by key.
type reconcileUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	flipped  bool // "flip" keys: 500 until flipped, then as "done"
	executed map[string]int
	lookups  map[string]int
}

func newReconcileUpstream(t *testing.T) *reconcileUpstream {
	u := &reconcileUpstream{executed: map[string]int{}, lookups: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/charges":
			key := r.Header.Get("Idempotency-Key")
			u.mu.Lock()
			u.executed[key]++
			n := u.executed[key]
			u.mu.Unlock()
			if n == 1 { // executed, and the answer is lost
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.(*net.TCPConn).SetLinger(0)
					conn.Close()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"id":"ch_%s","run":%d}`, key, n)
		case r.Method == "GET" && r.URL.Path == "/lookup":
			key := r.URL.Query().Get("key")
			u.mu.Lock()
			u.lookups[key]++
			flipped := u.flipped
			u.mu.Unlock()
			if r.Header.Get("Authorization") != "Bearer "+key {
				w.WriteHeader(401) // the copied header did not arrive
				return
			}
			prefix, _, _ := strings.Cut(key, "-")
			if prefix == "flip" && flipped {
				prefix = "done"
			}
			switch prefix {
			case "done":
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"ch_%s","status":"succeeded"}`, key)
			case "nf":
				w.WriteHeader(404)
			case "hang":
				<-r.Context().Done()
			default:
				w.WriteHeader(500)
			}
		default:
			w.WriteHeader(400)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *reconcileUpstream) flip() {
	u.mu.Lock()
	u.flipped = true
	u.mu.Unlock()
}

func (u *reconcileUpstream) counts(key string) (executed, lookups int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.executed[key], u.lookups[key]
}

// reconcileConfig is a route that reconciles quickly: 3 attempts, 300ms then
// 600ms apart, each bounded by 1s; a not-found answer releases the key from
// 2s (upstream_timeout) after the original was sent, at the second.
func reconcileConfig(upstream string) string {
	return "upstream: " + upstream + `
upstream_timeout: 2s
routes:
  - path: /charges
    reconcile: GET /lookup?key={key}
    reconcile_headers: [Authorization]
    reconcile_delay: 300ms
    reconcile_max_delay: 1s
    reconcile_attempts: 3
    reconcile_timeout: 1s
`
}

// keyJob is GET /keys/KEY's reconcile part.
type keyJob struct {
	Response struct {
		Unknown bool `json:"unknown_outcome"`
	} `json:"response"`
	Reconcile *struct {
		State      string `json:"state"`
		Attempts   int    `json:"attempts"`
		LastStatus int    `json:"last_status"`
		LastError  string `json:"last_error"`
	} `json:"reconcile"`
}

func getKeyJob(t *testing.T, admin, key string) keyJob {
	t.Helper()
	r := testutil.Send(t, admin, testutil.Request{Method: "GET", Target: "/keys/" + key + "?host=api.example&path=/charges&authorization=Bearer%20" + key})
	var out keyJob
	if r.Status != 200 || json.Unmarshal([]byte(r.Body), &out) != nil {
		t.Fatalf("GET /keys/%s: %d %s", key, r.Status, r.Body)
	}
	return out
}

// Each answer settles (or not) as documented, across two instances sharing
// the store: one reconciler per key, the original executed once.
func TestE2EReconcile(t *testing.T) {
	skipShort(t)
	t.Run("memory", func(t *testing.T) { reconcileAcross(t, "memory", 1) })
	t.Run("redis", func(t *testing.T) { reconcileAcross(t, redistest.Start(t).URL(), 2) })
	t.Run("postgres", func(t *testing.T) { reconcileAcross(t, pgtest.Start(t).URL(), 2) })
	t.Run("dynamodb", func(t *testing.T) { reconcileAcross(t, dynamoReconcileStore(t), 2) })
}

// dynamoReconcileStore starts a DynamoDB Local of the test's own, points the
// AWS environment the proxies inherit at it, and names a table they create.
func dynamoReconcileStore(t *testing.T) string {
	dynamotest.StartOwn(t).Env(t)
	return "dynamodb://e2e_reconcile"
}

func reconcileAcross(t *testing.T, store string, instances int) {
	up := newReconcileUpstream(t)
	cfg := reconcileConfig(up.URL)
	var ps []*testutil.Proc
	for range instances {
		ps = append(ps, startConfig(t, cfg, "--store", store))
	}
	at := func(i int) *testutil.Proc { return ps[i%len(ps)] }
	post := func(i int, key string) testutil.Response {
		return at(i).Post(t, "/charges", key, `{"amount":1}`, "Authorization", "Bearer "+key)
	}
	keys := []string{"done-1", "nf-1", "err-1", "hang-1"}
	for i, key := range keys {
		if r := post(i, key); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
			t.Fatalf("%s: first answer %d %s, want the held outcome-unknown answer", key, r.Status, r.Body)
		}
	}
	// done: the lookup's answer is stored, and every retry replays it.
	testutil.Eventually(t, 15*time.Second, "done-1 to settle", func() bool {
		r := post(1, "done-1")
		return r.Status == 200 && r.Replayed && r.Body == `{"id":"ch_done-1","status":"succeeded"}` &&
			r.Header.Get("Content-Type") == "application/json"
	})
	// not found: an answer before upstream_timeout does not count; the key
	// is released once a second not-found answer after it confirms the
	// first, and the retry runs (once).
	testutil.Eventually(t, 15*time.Second, "nf-1 to be released", func() bool {
		r := post(0, "nf-1")
		return r.Status == 201 && !r.Replayed
	})
	if r := post(1, "nf-1"); r.Status != 201 || !r.Replayed || r.Body != `{"id":"ch_nf-1","run":2}` {
		t.Fatalf("nf-1 after its retry ran: %+v", r)
	}
	// errors and hangs: tried reconcile_attempts times, then held for an operator.
	for _, key := range []string{"err-1", "hang-1"} {
		testutil.Eventually(t, 20*time.Second, key+" to run out of attempts", func() bool {
			j := getKeyJob(t, at(1).Admin, key)
			return j.Reconcile != nil && j.Reconcile.State == "exhausted"
		})
		j := getKeyJob(t, at(0).Admin, key)
		if !j.Response.Unknown || j.Reconcile.Attempts != 3 {
			t.Fatalf("%s: %+v %+v, want held with 3 attempts", key, j.Response, j.Reconcile)
		}
		if r := post(0, key); r.Status != 502 || !r.Replayed || !strings.Contains(r.Body, "outcome-unknown") {
			t.Fatalf("%s after its attempts ran out: %d %s, want still held", key, r.Status, r.Body)
		}
	}
	if j := getKeyJob(t, at(0).Admin, "err-1"); j.Reconcile.LastStatus != 500 {
		t.Fatalf("err-1 last status %d, want 500", j.Reconcile.LastStatus)
	}
	if j := getKeyJob(t, at(0).Admin, "hang-1"); j.Reconcile.LastStatus != 0 || !strings.Contains(j.Reconcile.LastError, "deadline") {
		t.Fatalf("hang-1 last answer %d %q, want none (the attempt's deadline)", j.Reconcile.LastStatus, j.Reconcile.LastError)
	}
	// One reconciler per key: each attempt reached the upstream once.
	for key, want := range map[string][2]int{"done-1": {1, 1}, "nf-1": {2, 3}, "err-1": {1, 3}, "hang-1": {1, 3}} {
		if executed, lookups := up.counts(key); executed != want[0] || lookups != want[1] {
			t.Errorf("%s: executed %d, reconcile requests %d; want %d and %d", key, executed, lookups, want[0], want[1])
		}
	}
	sent := 0
	for _, p := range ps {
		sent += metricSum(t, metricsOf(t, p.Admin), "idemproxy_reconcile_attempts_total")
	}
	if sent != 10 {
		t.Errorf("idemproxy_reconcile_attempts_total across the instances = %d, want 10", sent)
	}
}

// metricSum adds the values of a metric's samples.
func metricSum(t *testing.T, text, name string) int {
	t.Helper()
	sum := 0
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			sum += int(v)
		}
	}
	return sum
}

// An instance killed while a key waits for its first attempt: the instance
// that starts next finds the job in the store and settles the key. One killed
// after a first attempt that got no answer to settle on: the next resumes the
// schedule from the store, at the second attempt. One killed during an
// attempt: the next takes the job once the claim's claim lapses.
func TestE2EReconcileResumesAfterRestart(t *testing.T) {
	skipShort(t)
	t.Run("redis", func(t *testing.T) { reconcileAfterRestart(t, redistest.Start(t).URL()) })
	t.Run("postgres", func(t *testing.T) { reconcileAfterRestart(t, pgtest.Start(t).URL()) })
	t.Run("dynamodb", func(t *testing.T) { reconcileAfterRestart(t, dynamoReconcileStore(t)) })
}

func reconcileAfterRestart(t *testing.T, store string) {
	up := newReconcileUpstream(t)
	cfg := strings.Replace(reconcileConfig(up.URL), "reconcile_delay: 300ms", "reconcile_delay: 2s", 1)
	cfg = strings.Replace(cfg, "reconcile_max_delay: 1s", "reconcile_max_delay: 4s", 1)
	post := func(p *testutil.Proc, key string) testutil.Response {
		return p.Post(t, "/charges", key, "x", "Authorization", "Bearer "+key)
	}
	a := startConfig(t, cfg, "--store", store)
	if r := post(a, "done-r"); r.Status != 502 {
		t.Fatalf("first answer: %+v", r)
	}
	a.Kill()
	if _, lookups := up.counts("done-r"); lookups != 0 {
		t.Fatalf("the killed instance already reconciled (%d)", lookups)
	}
	b := startConfig(t, cfg, "--store", store)
	testutil.Eventually(t, 15*time.Second, "the restarted proxy to settle the key", func() bool {
		r := post(b, "done-r")
		return r.Status == 200 && r.Replayed
	})
	if executed, lookups := up.counts("done-r"); executed != 1 || lookups != 1 {
		t.Fatalf("executed %d, reconcile requests %d; want 1 and 1", executed, lookups)
	}

	if r := post(b, "flip-r"); r.Status != 502 {
		t.Fatalf("first answer: %+v", r)
	}
	testutil.Eventually(t, 15*time.Second, "a first attempt answered 500", func() bool {
		j := getKeyJob(t, b.Admin, "flip-r")
		return j.Reconcile != nil && j.Reconcile.Attempts == 1 && j.Reconcile.LastStatus == 500
	})
	b.Kill()
	up.flip()
	c := startConfig(t, cfg, "--store", store)
	testutil.Eventually(t, 15*time.Second, "the next proxy to settle the key at its second attempt", func() bool {
		r := post(c, "flip-r")
		return r.Status == 200 && r.Replayed && r.Body == `{"id":"ch_flip-r","status":"succeeded"}`
	})
	if executed, lookups := up.counts("flip-r"); executed != 1 || lookups != 2 {
		t.Fatalf("executed %d, reconcile requests %d; want 1 and 2", executed, lookups)
	}
	// The log line follows the store's Resolve, which returns once every
	// instance's local cache has had time to drop the key (up to 200ms after
	// the record changed): poll for it.
	testutil.Eventually(t, 5*time.Second, "the settlement logged as the second attempt", func() bool {
		logs := c.Logs.String()
		return strings.Contains(logs, `"outcome":"resolved"`) && strings.Contains(logs, `"attempt":2`)
	})

	// Killed during an attempt: the job comes back when the claim's claim
	// lapses (2 × reconcile_timeout + 5s), and the next instance runs the
	// attempts; the lost one is not counted.
	if r := post(c, "hang-r"); r.Status != 502 {
		t.Fatalf("first answer: %+v", r)
	}
	testutil.Eventually(t, 15*time.Second, "an attempt under way", func() bool {
		_, lookups := up.counts("hang-r")
		return lookups == 1
	})
	c.Kill()
	d := startConfig(t, cfg, "--store", store)
	testutil.Eventually(t, 40*time.Second, "the next proxy to run the attempts out", func() bool {
		j := getKeyJob(t, d.Admin, "hang-r")
		return j.Reconcile != nil && j.Reconcile.State == "exhausted"
	})
	if j := getKeyJob(t, d.Admin, "hang-r"); j.Reconcile.Attempts != 3 || !j.Response.Unknown {
		t.Fatalf("hang-r after the takeover: %+v %+v", j.Response, j.Reconcile)
	}
	if executed, lookups := up.counts("hang-r"); executed != 1 || lookups != 4 {
		t.Fatalf("executed %d, reconcile requests %d; want 1 and 4 (the killed instance's, then 3)", executed, lookups)
	}
}

// With tracing on, each reconcile attempt is a span, with the reconcile
// request's client span under it.
func TestE2EReconcileTraced(t *testing.T) {
	skipShort(t)
	rc := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	up := newReconcileUpstream(t)
	p := startConfig(t, reconcileConfig(up.URL))
	if r := p.Post(t, "/charges", "err-t", "x", "Authorization", "Bearer err-t"); r.Status != 502 {
		t.Fatalf("first answer: %+v", r)
	}
	var attempts []*tracepb.Span
	testutil.Eventually(t, 15*time.Second, "3 reconcile spans", func() bool {
		attempts = nil
		for _, s := range rc.Spans() {
			if s.Name == "idempotency.reconcile /charges" {
				attempts = append(attempts, s)
			}
		}
		return len(attempts) == 3
	})
	for i, a := range attempts {
		if got := otlptest.Attr(a, "idempotency.reconcile.answer").GetStringValue(); got != "other" ||
			otlptest.Attr(a, "http.response.status_code").GetIntValue() != 500 || len(otlptest.Attr(a, "idempotency.key_hash").GetStringValue()) != 12 {
			t.Errorf("attempt span %d: answer %q, attributes %v", i, got, a.Attributes)
		}
		child := false
		for _, s := range rc.Spans() {
			child = child || s.Kind == tracepb.Span_SPAN_KIND_CLIENT && bytes.Equal(s.ParentSpanId, a.SpanId)
		}
		if !child {
			t.Errorf("attempt span %d has no client span under it", i)
		}
	}
}

// An instance SIGKILLed mid-request on a reconciling route: once its claim
// lapses, the first retry finds the key held and schedules the reconcile
// request, which settles it: "done" (the upstream committed the charge) is
// stored and replayed, never run again; "not found" (it never committed)
// releases the key once the original can no longer be running, and the retry
// runs, once.
func TestE2EReconcileAfterSigkill(t *testing.T) {
	skipShort(t)
	t.Run("redis", func(t *testing.T) { reconcileAfterSigkill(t, redistest.Start(t).URL()) })
	t.Run("postgres", func(t *testing.T) { reconcileAfterSigkill(t, pgtest.Start(t).URL()) })
}

func reconcileAfterSigkill(t *testing.T, store string) {
	var mu sync.Mutex
	posts, committed := map[string]int{}, map[string]bool{}
	started := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		switch {
		case r.Method == "POST":
			mu.Lock()
			posts[key]++
			n := posts[key]
			mu.Unlock()
			if n == 1 {
				_, _ = io.ReadAll(r.Body) // read: the server then sees the connection close
				started <- key
				<-r.Context().Done() // its instance is killed: the charge commits, or not, by its name
				mu.Lock()
				committed[key] = strings.HasPrefix(key, "done")
				mu.Unlock()
				return
			}
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"id":"ch_%s","run":%d}`, key, n)
		case r.URL.Path == "/lookup":
			mu.Lock()
			ok := committed[r.URL.Query().Get("key")]
			mu.Unlock()
			if !ok {
				w.WriteHeader(404)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"ch_%s","status":"succeeded"}`, r.URL.Query().Get("key"))
		}
	}))
	t.Cleanup(up.Close)
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return posts[key]
	}
	cfg := "upstream: " + up.URL + `
upstream_timeout: 2s
lock_ttl: 1500ms
routes:
  - path: /charges
    reconcile: GET /lookup?key={key}
    reconcile_delay: 300ms
    reconcile_max_delay: 1s
    reconcile_attempts: 10
    reconcile_timeout: 1s
`
	for _, key := range []string{"done-k", "nf-k"} {
		p := startConfig(t, cfg, "--store", store)
		go func() { _, _ = testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/charges", key, "x")) }()
		<-started
		p.Kill()
		q := startConfig(t, cfg, "--store", store)
		testutil.Eventually(t, 10*time.Second, key+"'s lease to lapse", func() bool {
			r := q.Post(t, "/charges", key, "x")
			if r.Status != 409 && r.Status != 504 {
				t.Fatalf("%s while its lease lapses: %+v", key, r)
			}
			return r.Status == 504 && strings.Contains(r.Body, "outcome-unknown")
		})
		if strings.HasPrefix(key, "done") {
			testutil.Eventually(t, 15*time.Second, key+" to be reconciled", func() bool {
				r := q.Post(t, "/charges", key, "x")
				return r.Status == 200 && r.Replayed && r.Body == `{"id":"ch_done-k","status":"succeeded"}`
			})
			if n := count(key); n != 1 {
				t.Fatalf("%s ran %d times, want once", key, n)
			}
			continue
		}
		testutil.Eventually(t, 20*time.Second, key+" to be released", func() bool {
			r := q.Post(t, "/charges", key, "x")
			return r.Status == 201 && !r.Replayed
		})
		if r := q.Post(t, "/charges", key, "x"); r.Status != 201 || !r.Replayed || count(key) != 2 {
			t.Fatalf("%s after its release: %+v, %d posts; want the one retry's answer replayed", key, r, count(key))
		}
	}
}
