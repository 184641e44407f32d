package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

// fixture is a memory store, an upstream that answers GET /ops/{key} by the
// key's prefix (done: 200 with a body, nf: 404, big: 200 with a large body,
// other: 500) and counts the requests by key, and a route's rules.
type fixture struct {
	store *memstore.Store
	rules *reconcile.Rules
	sched *reconcile.Scheduler
	up    *url.URL

	now     func() time.Time // the workers' clock; nil: time.Now
	prepare func(*http.Request, *cache.Job) error

	mu       sync.Mutex
	hits     map[string]int
	hosts    map[string]string // the Host of each key's last reconcile request
	attempts []reconcile.Attempt
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{hits: map[string]int{}, hosts: map[string]string{}}
	var err error
	if f.store, err = memstore.New(memstore.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/base/ops/")
		f.mu.Lock()
		f.hits[key]++
		f.hosts[key] = r.Host
		f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer t" || r.Header.Get("User-Agent") != "idemproxy-reconcile" {
			w.WriteHeader(401)
			return
		}
		switch prefix, _, _ := strings.Cut(key, "-"); prefix {
		case "done":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Set-Cookie", "not=stored")
			w.Write([]byte(`{"id":"` + key + `"}`))
		case "big":
			w.Write([]byte(strings.Repeat("x", 100)))
		case "nf":
			w.WriteHeader(404)
		default:
			w.WriteHeader(500)
		}
	}))
	t.Cleanup(srv.Close)
	f.up, _ = url.Parse(srv.URL + "/base/")
	req, err := reconcile.ParseRequest("GET /ops/{key}")
	if err != nil {
		t.Fatal(err)
	}
	done, _ := middleware.ParseStatuses("200")
	notFound, _ := middleware.ParseStatuses("404")
	f.rules = &reconcile.Rules{Request: req, Headers: []string{"Authorization"}, Done: done, NotFound: notFound,
		Delay: 10 * time.Millisecond, Backoff: 2, MaxDelay: 20 * time.Millisecond, Attempts: 3, Window: time.Minute,
		Timeout: time.Second, MaxBody: 50, TTL: time.Hour}
	if err := f.rules.Check(); err != nil {
		t.Fatal(err)
	}
	f.sched = &reconcile.Scheduler{Route: "/charges", Rules: f.rules, Jobs: f.store}
	return f
}

// hold stores key as a held unknown outcome, as the middleware does: its job
// first, then the hold.
func (f *fixture) hold(t *testing.T, key string) string {
	t.Helper()
	return f.holdWith(t, key, nil)
}

// holdWith holds key with what change makes of the held request.
func (f *fixture) holdWith(t *testing.T, key string, change func(*middleware.Held)) string {
	t.Helper()
	storeKey := strings.Repeat("0", 64-len(key)) + key
	ctx := context.Background()
	if _, _, err := f.store.ClaimOrGet(ctx, storeKey, cache.Claim{Token: "tok", Fingerprint: "fp", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/charges", nil)
	r.Header.Set("Authorization", "Bearer t")
	h := middleware.Held{StoreKey: storeKey, Key: key, Request: r, Hold: time.Hour}
	if change != nil {
		change(&h)
	}
	if err := f.sched.Hold(ctx, h); err != nil {
		t.Fatal(err)
	}
	rec := &cache.Record{State: cache.StateCompleted, Fingerprint: "fp", Response: &cache.Response{Status: 502, Unknown: true}}
	if err := f.store.Complete(ctx, storeKey, "tok", rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	return storeKey
}

// run starts n workers on the store until the test ends.
func (f *fixture) run(t *testing.T, n int, routes map[string]*reconcile.Rules) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		w := &reconcile.Worker{Store: f.store, Jobs: f.store, Routes: routes, Upstream: f.up, Poll: 5 * time.Millisecond, Now: f.now, Prepare: f.prepare,
			Observe: func(a reconcile.Attempt) { f.mu.Lock(); f.attempts = append(f.attempts, a); f.mu.Unlock() }}
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func (f *fixture) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[key]
}

func (f *fixture) job(t *testing.T, storeKey string) *cache.Job {
	t.Helper()
	j, err := f.store.GetReconcile(context.Background(), storeKey)
	if err != nil && !errors.Is(err, cache.ErrNotFound) {
		t.Fatal(err)
	}
	return j
}

// Two workers on one store settle each key by its answer, one request per
// attempt: done is stored (status, Content-Type, body; nothing else), not found
// released once a second answer confirms it, a body above max_body remembered
// as done but not replayable, and errors tried reconcile_attempts times, then
// left held.
func TestWorkersSettleByTheRules(t *testing.T) {
	f := newFixture(t)
	keys := map[string]string{}
	for _, k := range []string{"done-1", "nf-1", "big-1", "err-1"} {
		keys[k] = f.hold(t, k)
	}
	f.run(t, 2, map[string]*reconcile.Rules{"/charges": f.rules})
	ctx := context.Background()
	testutil.Eventually(t, 5*time.Second, "every job to end", func() bool {
		for k, sk := range keys {
			if j := f.job(t, sk); j != nil && !(k == "err-1" && j.State == cache.JobExhausted) {
				return false
			}
		}
		return true
	})
	rec, err := f.store.Get(ctx, keys["done-1"])
	if err != nil || rec.Response.Unknown || rec.Response.Status != 200 || string(rec.Response.Body) != `{"id":"done-1"}` ||
		rec.Response.Header.Get("Content-Type") != "application/json" || rec.Response.Header.Get("Set-Cookie") != "" || rec.Fingerprint != "fp" {
		t.Fatalf("done-1: %+v %v", rec.Response, err)
	}
	if _, err := f.store.Get(ctx, keys["nf-1"]); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("nf-1 not released: %v", err)
	}
	if rec, err := f.store.Get(ctx, keys["big-1"]); err != nil || !rec.Response.Oversize || rec.Response.Unknown || len(rec.Response.Body) != 0 {
		t.Fatalf("big-1: %+v %v", rec.Response, err)
	}
	rec, err = f.store.Get(ctx, keys["err-1"])
	if err != nil || !rec.Response.Unknown {
		t.Fatalf("err-1 no longer held: %+v %v", rec, err)
	}
	if j := f.job(t, keys["err-1"]); j.Attempts != 3 || j.LastStatus != 500 || !j.Due.Equal(j.Until) {
		t.Fatalf("err-1 job %+v, want exhausted after 3 attempts, kept until the hold ends", j)
	}
	for k, want := range map[string]int{"done-1": 1, "nf-1": 2, "big-1": 1, "err-1": 3} {
		if got := f.count(k); got != want {
			t.Errorf("%s: %d reconcile requests, want %d", k, got, want)
		}
	}
	outcomes := map[string]int{}
	f.mu.Lock()
	for _, a := range f.attempts {
		outcomes[a.Outcome]++
	}
	f.mu.Unlock()
	if outcomes[reconcile.OutcomeResolved] != 2 || outcomes[reconcile.OutcomeReleased] != 1 || outcomes[reconcile.OutcomeRetry] != 3 ||
		outcomes[reconcile.OutcomeExhausted] != 1 {
		t.Fatalf("observed outcomes %v", outcomes)
	}
}

// A key settled otherwise before its attempt (an operator's release) sends
// nothing; a job of a route that no longer reconciles is exhausted unsent.
func TestWorkerSendsNothingForAKeyNoLongerHeld(t *testing.T) {
	f := newFixture(t)
	gone := f.hold(t, "done-gone")
	if err := f.store.Resolve(context.Background(), gone, nil, 0); err != nil {
		t.Fatal(err)
	}
	f.sched.Route = "/removed"
	orphan := f.hold(t, "done-orphan")
	f.run(t, 1, map[string]*reconcile.Rules{"/charges": f.rules})
	testutil.Eventually(t, 5*time.Second, "both jobs to end", func() bool {
		j := f.job(t, orphan)
		return f.job(t, gone) == nil && j != nil && j.State == cache.JobExhausted
	})
	if f.count("done-gone")+f.count("done-orphan") != 0 {
		t.Fatalf("reconcile requests sent for keys it should not ask about: %v", f.hits)
	}
	if rec, err := f.store.Get(context.Background(), orphan); err != nil || !rec.Response.Unknown {
		t.Fatalf("orphan no longer held: %v", err)
	}
}

func TestRulesCheckNamesTheSetting(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		field  string
		change func(r *reconcile.Rules)
	}{
		{"reconcile_delay", func(r *reconcile.Rules) { r.Delay = 0 }},
		{"reconcile_backoff", func(r *reconcile.Rules) { r.Backoff = 0 }},
		{"reconcile_max_delay", func(r *reconcile.Rules) { r.MaxDelay = time.Millisecond }},
		{"reconcile_attempts", func(r *reconcile.Rules) { r.Attempts = 0 }},
		{"reconcile_window", func(r *reconcile.Rules) { r.Window = 0 }},
		{"reconcile_timeout", func(r *reconcile.Rules) { r.Timeout = 0 }},
		{"reconcile_not_found", func(r *reconcile.Rules) { r.NotFound, _ = middleware.ParseStatuses("200") }},
		// A not-found answer needs a second one, within the window, once
		// the original can no longer be running.
		{"reconcile_attempts", func(r *reconcile.Rules) { r.Attempts = 1 }},
		{"reconcile_window", func(r *reconcile.Rules) { r.Running = r.Window + time.Second }},
		{"reconcile_window", func(r *reconcile.Rules) { r.Delay, r.MaxDelay = r.Window*2/3, r.Window }},
	} {
		r := *f.rules
		tc.change(&r)
		var se *cache.FieldError
		if err := r.Check(); !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("%s: Check() = %v", tc.field, err)
		}
	}
	r := *f.rules
	r.Running = r.Window // just room for the confirmation
	if err := r.Check(); err != nil {
		t.Errorf("a window as long as the original may run: %v", err)
	}
}
