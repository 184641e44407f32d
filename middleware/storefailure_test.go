package middleware_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

func TestStoreFailure(t *testing.T) {
	store := &flaky{Store: newMem(t)}
	store.failClaim.Store(true)
	var logs testutil.SyncBuffer // the undo of the failed claim logs from its own goroutine
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	c := &counter{}
	closed := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logger }).Wrap(c)
	w := serve(closed, req{Key: "secret-key-value", Header: http.Header{"Authorization": {"Bearer s3cr3t"}}})
	if w.Code != 503 || c.Calls.Load() != 0 {
		t.Fatalf("fail closed: %d, calls %d; want 503 and no call", w.Code, c.Calls.Load())
	}
	checkProblem(t, w.Header(), w.Body.Bytes(), 503, middleware.ProblemStoreUnavailable)
	if s := logs.String(); !strings.Contains(s, "store unavailable") || strings.Contains(s, "secret-key-value") || strings.Contains(s, "s3cr3t") {
		t.Fatalf("log must mention the failure and never the key or credentials: %s", s)
	}

	var evs events
	open := newHandler(t, store, func(s *middleware.Settings) { s.FailOpen = true }, func(s *middleware.Settings) { s.Logger = logger }, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
	if w := serve(open, req{Key: "k"}); w.Code != 201 || c.Calls.Load() != 1 {
		t.Fatalf("fail open: %d, calls %d; want 201 and one call", w.Code, c.Calls.Load())
	}
	if o := evs.Outcomes(); len(o) != 1 || o[0] != middleware.OutcomeStoreError || evs.All()[0].Status != 201 {
		t.Fatalf("fail open events: %+v", evs.All())
	}

	// Complete failing after the execution (the store restarting): the claim still
	// holds the key, so a retry gets 409 and nothing runs twice; storing is retried
	// in the background, and once the store is back the retry is replayed.
	store.failClaim.Store(false)
	store.failComplete.Store(true)
	calls := c.Calls.Load()
	core := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logger })
	h := core.Wrap(c)
	serve(h, req{Key: "cf"})
	if w := serve(h, req{Key: "cf"}); w.Code != 409 {
		t.Fatalf("while the response is not stored yet: %d, want 409", w.Code)
	}
	store.failComplete.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if w := serve(h, req{Key: "cf"}); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" || c.Calls.Load() != calls+1 {
		t.Fatalf("after the store came back: %d replayed=%q calls=%d; want the stored replay", w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load()-calls)
	}
}

// completeDown is a first execution of key "k" whose response the store
// refuses to complete (a claim of 60 ms): storing it goes on in the background.
type completeDown struct {
	store *flaky
	core  *middleware.Handler
	h     http.Handler
	c     *counter
	first *httptest.ResponseRecorder
}

func newCompleteDown(t *testing.T, opts ...middleware.Option) *completeDown {
	d := &completeDown{store: &flaky{Store: newMem(t)}, c: &counter{}}
	d.store.failComplete.Store(true)
	d.core = newHandler(t, d.store, append([]middleware.Option{func(s *middleware.Settings) { s.ClaimTTL = 60 * time.Millisecond }}, opts...)...)
	d.h = d.core.Wrap(d.c)
	d.first = serve(d.h, req{Key: "k"})
	return d
}

// wait waits up to 5 s for the background completion to end (it did not
// finish, or did not give up: what).
func (d *completeDown) wait(t *testing.T, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.core.Wait(ctx); err != nil {
		t.Fatalf("the background completion did not %s: %v", what, err)
	}
}

// replaysTheOneRun checks that a retry of "k" is the replay of the first
// execution, the only one.
func (d *completeDown) replaysTheOneRun(t *testing.T, retry string) {
	t.Helper()
	if w := serve(d.h, req{Key: "k"}); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != d.first.Body.String() || d.c.Calls.Load() != 1 {
		t.Fatalf("%s: %d replayed=%q, %d runs; want the replay of the one run", retry, w.Code, w.Header().Get("Idempotent-Replayed"), d.c.Calls.Load())
	}
}

// A store outage longer than the claim no longer makes a second run: the
// finished response is kept and stored once the store answers, the claim having
// lapsed, because nobody claimed the key meanwhile. (It used to give up at the
// lease's end, and the retry ran again.)
func TestCompleteRetryOutlivesTheLease(t *testing.T) {
	d := newCompleteDown(t)
	time.Sleep(200 * time.Millisecond) // the outage lasts over three leases
	d.store.failComplete.Store(false)
	d.wait(t, "finish")
	d.replaysTheOneRun(t, "retry after an outage past the lease")
}

// A pending completion that finds another request's claim on the free key keeps
// trying: that claim may be refused and undone (a Redis claim no replica
// acknowledged; found by the soak's failover phase, where the completion gave up
// and the key ran again), or released. It lands once the key is free.
func TestCompleteRetryOutlivesAnotherClaim(t *testing.T) {
	d := newCompleteDown(t)
	mem := d.store.Store
	key := d.core.StoreKey(req{Key: "k"}.Build(), "k")
	time.Sleep(100 * time.Millisecond) // the outage outlasts the claim
	// The lapsed claim is held; a failover that lost it frees the key.
	if err := mem.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, loaded, err := mem.ClaimOrGet(context.Background(), key, cache.Claim{Token: "other", Fingerprint: "fp", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("another claim on the lapsed key: loaded=%v err=%v", loaded, err)
	}
	tries := d.store.completes.Load()
	d.store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the pending completion to meet the other claim", func() bool { return d.store.completes.Load() > tries })
	if err := mem.Release(context.Background(), key, "other"); err != nil { // refused and undone
		t.Fatal(err)
	}
	d.wait(t, "finish")
	d.replaysTheOneRun(t, "retry after the other claim was undone")
}

// The other claim may be gone by the time the pending completion reads the
// key: a free key is no reason to give up either (seen in the soak's waited
// failover round, with the first version of the fix above).
func TestCompleteRetryKeepsOnAFreedKey(t *testing.T) {
	d := newCompleteDown(t)
	time.Sleep(100 * time.Millisecond) // the claim lapses: the key reads as free
	d.store.claimLostOnce.Store(true)
	d.store.failComplete.Store(false)
	d.wait(t, "finish")
	d.replaysTheOneRun(t, "retry")
}

// complete_retry bounds the background completion; past it the claim lapses
// and the key is held as an unknown outcome: the retry is not run again. (It
// used to run again: the documented limit.) Under unknown_outcome release it
// still runs again.
func TestCompleteRetryGivesUpAfterItsBound(t *testing.T) {
	d := newCompleteDown(t, func(s *middleware.Settings) { s.CompleteRetry = 300 * time.Millisecond })
	d.wait(t, "give up")
	d.store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the lease to lapse", func() bool { return serve(d.h, req{Key: "k"}).Code != 409 })
	w := serve(d.h, req{Key: "k"})
	checkProblem(t, w.Header(), w.Body.Bytes(), 504, middleware.ProblemOutcomeUnknown)
	if d.c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1 (held)", d.c.Calls.Load())
	}

	d = newCompleteDown(t, func(s *middleware.Settings) {
		s.CompleteRetry = 300 * time.Millisecond
		s.UnknownOutcome = middleware.UnknownRelease
	})
	d.wait(t, "give up")
	d.store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the lease to lapse", func() bool { return serve(d.h, req{Key: "k"}).Code == 201 })
	if d.c.Calls.Load() != 2 {
		t.Fatalf("unknown_outcome release: calls = %d, want 2", d.c.Calls.Load())
	}
}

func TestStoreFullAnswers503(t *testing.T) {
	store := newMem(t, memstore.Options{MaxRecords: 1, Shards: 1})
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release }}
	h := newHandler(t, store).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "a"}) }()
	<-started
	if w := serve(h, req{Key: "b"}); w.Code != 503 {
		t.Fatalf("store full with only in-flight locks: %d, want 503", w.Code)
	}
	close(release)
	<-done
}

// A response the store can never hold (its byte bound is below max_body) is kept
// as "done, not replayable", like one above max_body: the retry gets 409 and the
// handler does not run twice.
func TestResponseTooLargeForTheStore(t *testing.T) {
	store := newMem(t, memstore.Options{MaxBytes: 16 << 10, Shards: 1})
	body := strings.Repeat("x", 64<<10)
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		_, _ = w.Write([]byte(body))
	}}
	h := newHandler(t, store).Wrap(c)
	if w := serve(h, req{Key: "big", Body: "a"}); w.Code != 201 || w.Body.String() != body {
		t.Fatalf("first: %d, %d bytes", w.Code, w.Body.Len())
	}
	w := serve(h, req{Key: "big", Body: "a"})
	if w.Code != 409 || !strings.Contains(w.Body.String(), "not-replayable") {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// holding counts the holds on a store that implements cache.Pinned.
type holding struct {
	*flaky
	holds atomic.Int64
}

func (s *holding) Pin() func() {
	s.holds.Add(1)
	var once sync.Once
	return func() { once.Do(func() { s.holds.Add(-1) }) }
}

// A store that implements cache.Pinned is held for every tracked request and for
// a completion retried in the background until that ends, so a pool that closes
// stores on a reload never closes one under a request.
func TestStoreHeldWhileUsed(t *testing.T) {
	store := &holding{flaky: &flaky{Store: newMem(t)}}
	store.failComplete.Store(true)
	var during int64
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		during = store.holds.Load()
		w.WriteHeader(201)
	}}
	h := newHandler(t, store, func(s *middleware.Settings) { s.ClaimTTL = 10 * time.Second }).Wrap(c)
	serve(h, req{Key: "held"})
	if during != 1 {
		t.Fatalf("holds while the request ran: %d, want 1", during)
	}
	if n := store.holds.Load(); n != 1 {
		t.Fatalf("holds after the answer, its completion pending: %d, want 1", n)
	}
	store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the background completion to release its hold", func() bool { return store.holds.Load() == 0 })
	if w := serve(h, req{Key: "held"}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("not stored by the background completion: %d", w.Code)
	}
	testutil.Eventually(t, 5*time.Second, "the replay to release its hold", func() bool { return store.holds.Load() == 0 })
}
