// Package middlewaretest is the core's behaviour suite, run against every store:
// a store passes cache/cachetest (its contract) and this (the protocol on top of
// it: run once, 409, 422, replay, release on 5xx, wait).
//
//	func TestMiddlewareSuite(t *testing.T) {
//		middlewaretest.Run(t, func(t *testing.T) cache.Store { return newStore(t) })
//	}
package middlewaretest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/fingerprint"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// Run runs the suite. newStore returns a fresh, empty store for one subtest; it
// registers its own cleanup.
func Run(t *testing.T, newStore func(t *testing.T) cache.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, store cache.Store)
	}{
		{"RunOnceUnderConcurrency", runOnce},
		{"ReplayIsTheStoredResponse", replay},
		{"InFlightDuplicateGets409", inFlight409},
		{"KeyReuseGets422", mismatch422},
		{"CanonicalFingerprintNamesThePart", canonicalFingerprint},
		{"ServerErrorReleasesTheKey", release5xx},
		{"ScopeKeepsClientsApart", scope},
		{"WaitThenReplay", waitThenReplay},
		{"WaitAfterReleaseOneRuns", waitReleaseOneRuns},
		{"WaiterWokenByALockClaimedAfterItSubscribed", waitOnRelock},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// upstream counts executions and answers 201, or what status says.
type upstream struct {
	calls  atomic.Int64
	gate   chan struct{} // when set, executions wait for it to close
	status atomic.Int64
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := u.calls.Add(1)
	if u.gate != nil {
		<-u.gate
	}
	body, _ := io.ReadAll(r.Body)
	status := int(u.status.Load())
	if status == 0 {
		status = http.StatusCreated
	}
	w.Header().Set("X-Execution", fmt.Sprint(n))
	w.Header().Add("Set-Cookie", "a=1")
	w.Header().Add("Set-Cookie", "b=2")
	w.WriteHeader(status)
	fmt.Fprintf(w, "execution %d of %s", n, body)
}

func newHandler(t *testing.T, store cache.Store, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	h, err := middleware.New(store, append([]middleware.Option{func(s *middleware.Settings) { s.RetryAfter = time.Second }}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func send(h http.Handler, key, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://api.example/charges", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func runOnce(t *testing.T, store cache.Store) {
	up := &upstream{}
	h := newHandler(t, store).Wrap(up)
	const n = 16
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = send(h, "once", "amount=1").Code
		}()
	}
	wg.Wait()
	if got := up.calls.Load(); got != 1 {
		t.Fatalf("%d concurrent duplicates ran %d times, want once (answers %v)", n, got, codes)
	}
	for _, c := range codes {
		if c != http.StatusCreated && c != http.StatusConflict {
			t.Fatalf("answers %v: want only 201 (first or replay) and 409", codes)
		}
	}
}

func replay(t *testing.T, store cache.Store) {
	up := &upstream{}
	h := newHandler(t, store).Wrap(up)
	first := send(h, "replay", "amount=2")
	again := send(h, "replay", "amount=2")
	if up.calls.Load() != 1 {
		t.Fatalf("ran %d times", up.calls.Load())
	}
	if again.Code != first.Code || again.Body.String() != first.Body.String() ||
		again.Header().Get("X-Execution") != "1" || len(again.Header().Values("Set-Cookie")) != 2 {
		t.Fatalf("replay %d %q %v differs from the first %d %q %v", again.Code, again.Body, again.Header(),
			first.Code, first.Body, first.Header())
	}
	if again.Header().Get("Idempotent-Replayed") != "true" || first.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("Idempotent-Replayed: first %q, replay %q", first.Header().Get("Idempotent-Replayed"), again.Header().Get("Idempotent-Replayed"))
	}
}

func inFlight409(t *testing.T, store cache.Store) {
	up := &upstream{gate: make(chan struct{})}
	h := newHandler(t, store).Wrap(up)
	done := make(chan int)
	go func() { done <- send(h, "busy", "x").Code }()
	testutil.Eventually(t, 10*time.Second, "the first execution", func() bool { return up.calls.Load() == 1 })
	dup := sendWithin(t, 10*time.Second, up, h, "busy", "x")
	close(up.gate)
	if dup.Code != http.StatusConflict || dup.Header().Get("Retry-After") != "1" {
		t.Fatalf("duplicate in flight: %d, Retry-After %q; want 409 and 1", dup.Code, dup.Header().Get("Retry-After"))
	}
	if c := <-done; c != http.StatusCreated {
		t.Fatalf("first: %d", c)
	}
}

func mismatch422(t *testing.T, store cache.Store) {
	up := &upstream{}
	h := newHandler(t, store).Wrap(up)
	send(h, "reuse", "amount=1")
	if w := send(h, "reuse", "amount=9"); w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("key reused with another body: %d, want 422", w.Code)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("ran %d times", up.calls.Load())
	}
}

// canonicalFingerprint: the fingerprint with its part digests goes through the
// store intact: a JSON retry serialised anew replays, a changed one gets 422
// naming the member.
func canonicalFingerprint(t *testing.T, store cache.Store) {
	bf, err := fingerprint.NewJSON("/request_time")
	if err != nil {
		t.Fatal(err)
	}
	up := &upstream{}
	h := newHandler(t, store, func(s *middleware.Settings) {
		s.BodyFingerprint, s.FingerprintHeaders = bf, []string{"X-Tenant"}
	}).Wrap(up)
	send(h, "canon", `{"amount":1,"to":"x","request_time":1}`, "X-Tenant", "a")
	if w := send(h, "canon", `{ "request_time": 2, "to": "\u0078", "amount": 1.0 }`, "X-Tenant", "a"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-serialised retry: %d %s", w.Code, w.Body)
	}
	w := send(h, "canon", `{"amount":2,"to":"x"}`, "X-Tenant", "b")
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "/amount, the header X-Tenant") && !strings.Contains(w.Body.String(), "the header X-Tenant, /amount") {
		t.Fatalf("changed retry: %d %s", w.Code, w.Body)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("ran %d times", up.calls.Load())
	}
}

func release5xx(t *testing.T, store cache.Store) {
	up := &upstream{}
	up.status.Store(http.StatusInternalServerError)
	h := newHandler(t, store).Wrap(up)
	if w := send(h, "flaky", "x"); w.Code != http.StatusInternalServerError {
		t.Fatalf("first: %d", w.Code)
	}
	up.status.Store(http.StatusCreated)
	if w := send(h, "flaky", "x"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after a 500: %d replayed %q; want a second execution", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if up.calls.Load() != 2 {
		t.Fatalf("ran %d times, want 2", up.calls.Load())
	}
}

func scope(t *testing.T, store cache.Store) {
	up := &upstream{}
	h := newHandler(t, store).Wrap(up)
	send(h, "shared", "x", "Authorization", "Bearer alice")
	bob := send(h, "shared", "x", "Authorization", "Bearer bob")
	if up.calls.Load() != 2 || bob.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("bob got alice's response (executions %d)", up.calls.Load())
	}
}

func waitThenReplay(t *testing.T, store cache.Store) {
	up := &upstream{gate: make(chan struct{})}
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 10 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = 20 * time.Millisecond }).Wrap(up)
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- send(h, "wait", "x") }()
	testutil.Eventually(t, 10*time.Second, "the first execution", func() bool { return up.calls.Load() == 1 })
	dup := make(chan *httptest.ResponseRecorder)
	go func() { dup <- send(h, "wait", "x") }()
	time.Sleep(50 * time.Millisecond) // let the duplicate start waiting (it is correct either way)
	close(up.gate)
	f, d := <-first, <-dup
	if f.Code != http.StatusCreated || d.Code != http.StatusCreated || d.Header().Get("Idempotent-Replayed") != "true" || d.Body.String() != f.Body.String() {
		t.Fatalf("waiting duplicate: %d %q replayed %q; first %d %q", d.Code, d.Body, d.Header().Get("Idempotent-Replayed"), f.Code, f.Body)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("ran %d times", up.calls.Load())
	}
}

func waitReleaseOneRuns(t *testing.T, store cache.Store) {
	gate := make(chan struct{})
	var calls atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-gate
			w.WriteHeader(http.StatusServiceUnavailable) // released: a waiter runs
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 10 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = 20 * time.Millisecond }).Wrap(next)
	first := make(chan int)
	go func() { first <- send(h, "released", "x").Code }()
	testutil.Eventually(t, 10*time.Second, "the first execution", func() bool { return calls.Load() == 1 })
	const waiters = 4
	codes := make(chan int, waiters)
	for range waiters {
		go func() { codes <- send(h, "released", "x").Code }()
	}
	time.Sleep(50 * time.Millisecond)
	close(gate)
	if c := <-first; c != http.StatusServiceUnavailable {
		t.Fatalf("first: %d", c)
	}
	for range waiters {
		if c := <-codes; c != http.StatusCreated {
			t.Fatalf("a waiter got %d, want 201 (one runs, the others get its replay)", c)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("ran %d times after the release, want exactly 1 more", calls.Load()-1)
	}
}

// sendWithin sends a request that must be answered while the upstream's gate is
// shut; if it is not (a store that let it run), it opens the gate and fails.
func sendWithin(t *testing.T, d time.Duration, up *upstream, h http.Handler, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	got := make(chan *httptest.ResponseRecorder, 1)
	go func() { got <- send(h, key, body) }()
	select {
	case w := <-got:
		return w
	case <-time.After(d):
		close(up.gate)
		t.Fatalf("the duplicate was not answered while the first ran: it ran too (executions %d)", up.calls.Load())
		return nil
	}
}

// relocking passes a store through, but the first claim once armed is preceded
// by another instance's claim of the same key (under its fingerprint): a
// duplicate woken by the first request's release reads a claim that another
// waiter took after this one subscribed.
type relocking struct {
	cache.Store
	armed   atomic.Bool
	claimed chan [2]string // key, fingerprint: the other claim was made
	subs    atomic.Int64
}

func (s *relocking) Subscribe(key string) (<-chan struct{}, func()) {
	s.subs.Add(1)
	return s.Store.(cache.Notifier).Subscribe(key)
}

func (s *relocking) ClaimOrGet(ctx context.Context, key string, lock cache.Claim) (*cache.Record, bool, error) {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Store.ClaimOrGet(ctx, key, lock)
	}
	other := lock
	other.Token = "another-instance"
	if _, loaded, err := s.Store.ClaimOrGet(ctx, key, other); err != nil || loaded {
		panic(fmt.Sprintf("the other claim: loaded=%v err=%v", loaded, err))
	}
	rec, loaded, err := s.Store.ClaimOrGet(ctx, key, lock)
	s.claimed <- [2]string{key, lock.Fingerprint}
	return rec, loaded, err
}

// waitOnRelock: a duplicate waits for the first request; that one fails (its
// key is released) and, before the duplicate reads again, another instance's
// waiter claims the key. The duplicate now waits for that claim, which may have
// been claimed after its last Subscribe; its completion must still wake it,
// polling or not (here: polling once an hour).
func waitOnRelock(t *testing.T, store cache.Store) {
	if _, ok := store.(cache.Notifier); !ok {
		t.Skip("the store announces nothing")
	}
	s := &relocking{Store: store, claimed: make(chan [2]string, 1)}
	gate := make(chan struct{})
	var calls atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-gate
		w.WriteHeader(http.StatusServiceUnavailable) // released
	})
	h := newHandler(t, s, func(s *middleware.Settings) { s.Wait = 5 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = time.Hour }).Wrap(next)
	first := make(chan int, 1)
	go func() { first <- send(h, "relock", "x").Code }()
	testutil.Eventually(t, 10*time.Second, "the first execution", func() bool { return calls.Load() == 1 })
	dup := make(chan *httptest.ResponseRecorder, 1)
	go func() { dup <- send(h, "relock", "x") }()
	testutil.Eventually(t, 10*time.Second, "the duplicate waiting", func() bool { return s.subs.Load() > 0 })
	time.Sleep(50 * time.Millisecond) // the duplicate has read the claim and waits
	s.armed.Store(true)
	close(gate)
	if c := <-first; c != http.StatusServiceUnavailable {
		t.Fatalf("first: %d", c)
	}
	var other [2]string
	select {
	case other = <-s.claimed:
	case <-time.After(5 * time.Second):
		t.Fatal("the duplicate did not read the key again after the release")
	}
	rec := &cache.Record{Fingerprint: other[1], Response: &cache.Response{Status: http.StatusCreated, Body: []byte("by another instance")}}
	if err := store.Complete(context.Background(), other[0], "another-instance", rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-dup:
		if d.Code != http.StatusCreated || d.Body.String() != "by another instance" {
			t.Fatalf("the duplicate got %d %q, want the other instance's 201", d.Code, d.Body)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the duplicate was not woken by the completion of the lock it waited for")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}
