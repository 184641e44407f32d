package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// subscriptions counts Subscribe calls and can drop every notification.
type subscriptions struct {
	cache.Store
	n    atomic.Int64
	drop bool
}

func (s *subscriptions) Subscribe(key string) (<-chan struct{}, func()) {
	s.n.Add(1)
	if s.drop {
		return make(chan struct{}), func() {} // never closes: a lost message
	}
	return s.Store.(cache.Notifier).Subscribe(key)
}

// duplicates sends n concurrent duplicates and returns their answers once all are
// back, after calling whileWaiting when every one of them has subscribed.
func duplicates(t *testing.T, h http.Handler, store *subscriptions, n int, whileWaiting func()) []testutil.Result {
	t.Helper()
	out := make(chan testutil.Result, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := serve(h, req{Key: "w"})
			out <- testutil.ResultOf(w)
		}()
	}
	testutil.Eventually(t, 5*time.Second, "every duplicate to wait", func() bool { return store.n.Load() >= int64(n) })
	whileWaiting()
	wg.Wait()
	close(out)
	var all []testutil.Result
	for a := range out {
		all = append(all, a)
	}
	return all
}

// gated is a counter whose first call closes started and blocks until gate closes,
// then answers with first; later calls answer with later at once.
func gated(first, later func(w http.ResponseWriter)) (c *counter, gate, started chan struct{}) {
	gate, started = make(chan struct{}), make(chan struct{})
	c = &counter{}
	c.Fn = func(w http.ResponseWriter, r *http.Request) {
		if c.Calls.Load() == 1 {
			close(started)
			<-gate
			first(w)
			return
		}
		later(w)
	}
	return c, gate, started
}

func created(body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(201)
		_, _ = w.Write([]byte(body))
	}
}

func blockedFirst(t *testing.T, h http.Handler) (release func()) {
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "w"}) }()
	return func() { <-done }
}

func TestWaitThenReplayWithoutPolling(t *testing.T) {
	store := &subscriptions{Store: newMem(t)}
	c, gate, started := gated(created("paid"), created("paid"))
	// Polling once an hour: only a notification can deliver the replay in time.
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 30 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = time.Hour }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	answers := duplicates(t, h, store, 50, func() { close(gate) })
	finished()
	for _, a := range answers {
		if a.Status != 201 || !a.Replayed || a.Body != "paid" {
			t.Fatalf("waiter got %+v, want the replay", a)
		}
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", c.Calls.Load())
	}
}

func TestWaitTimesOutWith409(t *testing.T) {
	store := &subscriptions{Store: newMem(t)}
	gate, started := make(chan struct{}), make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-gate; w.WriteHeader(200) }}
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 30 * time.Millisecond }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	w := serve(h, req{Key: "w"})
	if w.Code != 409 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("after the wait: %d, want 409 with Retry-After", w.Code)
	}
	close(gate)
	finished()
}

// The first request fails (5xx, released): exactly one waiter takes the key and
// runs; the others wait for it and replay its response.
func TestWaitReleaseOneWaiterRuns(t *testing.T) {
	store := &subscriptions{Store: newMem(t)}
	c, gate, started := gated(func(w http.ResponseWriter) { w.WriteHeader(503) }, created("second try"))
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 30 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = time.Hour }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	answers := duplicates(t, h, store, 20, func() { close(gate) })
	finished()
	ran, replayed := 0, 0
	for _, a := range answers {
		switch {
		case a.Status == 201 && !a.Replayed:
			ran++
		case a.Status == 201 && a.Replayed && a.Body == "second try":
			replayed++
		default:
			t.Fatalf("waiter got %+v", a)
		}
	}
	if c.Calls.Load() != 2 || ran != 1 || replayed != 19 {
		t.Fatalf("calls %d, ran %d, replayed %d; want 2 calls (the failed first, one waiter), 1 run, 19 replays", c.Calls.Load(), ran, replayed)
	}
}

// A lost notification costs a poll interval, never correctness.
func TestWaitSurvivesLostNotifications(t *testing.T) {
	store := &subscriptions{Store: newMem(t), drop: true}
	c, gate, started := gated(created(""), created(""))
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 30 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = 10 * time.Millisecond }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	answers := duplicates(t, h, store, 10, func() { close(gate) })
	finished()
	for _, a := range answers {
		if a.Status != 201 || !a.Replayed {
			t.Fatalf("waiter got %+v", a)
		}
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d", c.Calls.Load())
	}
}

func TestWaitDoesNotDelayMismatch(t *testing.T) {
	gate, started := make(chan struct{}), make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-gate }}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.Wait = time.Hour }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	if w := serve(h, req{Key: "w", Body: "different"}); w.Code != 422 {
		t.Fatalf("mismatch while waiting is configured: %d", w.Code)
	}
	close(gate)
	finished()
}

func TestInFlightOnly(t *testing.T) {
	ok := func(w http.ResponseWriter) { w.WriteHeader(200); _, _ = w.Write([]byte("personal data")) }
	c, gate, started := gated(ok, ok)
	var evs events
	store := newMem(t)
	h := newHandler(t, store, func(s *middleware.Settings) { s.InFlightOnly = true }, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	if w := serve(h, req{Key: "w"}); w.Code != 409 {
		t.Fatalf("concurrent duplicate: %d, want 409", w.Code)
	}
	close(gate)
	finished()
	if store.Len() != 0 {
		t.Fatalf("%d records kept; in-flight-only keeps none", store.Len())
	}
	if w := serve(h, req{Key: "w"}); w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" || c.Calls.Load() != 2 {
		t.Fatalf("later retry: %d replayed=%q calls=%d; want a second run", w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load())
	}
	if _, err := middleware.New(store, func(s *middleware.Settings) { s.InFlightOnly = true }, func(s *middleware.Settings) { s.Wait = time.Second }); err == nil {
		t.Fatal("wait with in-flight-only accepted")
	}
	if _, err := middleware.New(store, func(s *middleware.Settings) { s.Wait = -time.Second }); err == nil {
		t.Fatal("negative wait accepted")
	}
}

// wrapped is a store wrapped only to add a Holder (Caddy's handle on a pooled
// store): its own method set hides the wrapped store's optional interfaces.
type wrapped struct {
	cache.Store
	holds atomic.Int64
}

func (w *wrapped) Unwrap() cache.Store { return w.Store }

func (w *wrapped) Pin() func() {
	w.holds.Add(1)
	var once sync.Once
	return func() { once.Do(func() { w.holds.Add(-1) }) }
}

// A wrapped store (cache.Wrapper) is held through the wrapper and used as
// itself: its notifications wake the waiting duplicates (polling once an hour,
// only they can), as if it were not wrapped.
func TestWrappedStoreKeepsItsInterfaces(t *testing.T) {
	store := &subscriptions{Store: newMem(t)}
	w := &wrapped{Store: store}
	c, gate, started := gated(created("paid"), created("paid"))
	var during int64
	first := c.Fn
	c.Fn = func(rw http.ResponseWriter, r *http.Request) {
		if c.Calls.Load() == 1 {
			during = w.holds.Load()
		}
		first(rw, r)
	}
	h := newHandler(t, w, func(s *middleware.Settings) { s.Wait = 30 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = time.Hour }).Wrap(c)
	finished := blockedFirst(t, h)
	<-started
	answers := duplicates(t, h, store, 5, func() { close(gate) })
	finished()
	for _, a := range answers {
		if a.Status != 201 || !a.Replayed {
			t.Fatalf("waiter got %+v, want the replay", a)
		}
	}
	if during < 1 {
		t.Fatalf("holds while the first ran: %d; the wrapper was not held", during)
	}
	testutil.Eventually(t, 5*time.Second, "every hold to be released", func() bool { return w.holds.Load() == 0 })
}

// The lease is renewed while next runs: the fake clock moves well past the claim,
// but only in steps shorter than it, each after a renewal.
func TestLeaseRenewalKeepsSlowRequestLocked(t *testing.T) {
	clk := cachetest.NewClock()
	store := &flaky{Store: newMem(t, memstore.Options{Now: clk.Now}), extends: make(chan struct{}, 1)}
	const lease = 30 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release; w.WriteHeader(200) }}
	h := newHandler(t, store, func(s *middleware.Settings) { s.ClaimTTL = lease }).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "slow"}) }()
	<-started
	for i := 0; i < 6; i++ { // 6 × 20ms = 4 leases of fake time
		select {
		case <-store.extends:
		case <-time.After(5 * time.Second):
			t.Fatalf("no lease renewal after %d steps", i)
		}
		clk.Advance(2 * lease / 3)
		if w := serve(h, req{Key: "slow"}); w.Code != 409 {
			t.Fatalf("step %d: duplicate got %d, want 409 (lock lost)", i, w.Code)
		}
	}
	close(release)
	<-done
	if w := serve(h, req{Key: "slow"}); w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after completion: %d replayed=%q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", c.Calls.Load())
	}
}

// Under unknown_outcome release, a holder whose claim lapsed (no renewal got
// through) cannot overwrite the newer holder's record.
func TestLapsedLeaseOldHolderCannotOverwrite(t *testing.T) {
	clk := cachetest.NewClock()
	store := newMem(t, memstore.Options{Now: clk.Now})
	var evs events
	releaseFirst := make(chan struct{})
	firstStarted := make(chan struct{})
	c := &counter{}
	c.Fn = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Which") == "first" {
			close(firstStarted)
			<-releaseFirst
		}
		w.WriteHeader(200)
		_, _ = w.Write([]byte(r.Header.Get("X-Which")))
	}
	// The lease is long in real time (no renewal fires during the test) and
	// lapses by moving the fake clock.
	h := newHandler(t, store, func(s *middleware.Settings) { s.ClaimTTL, s.UnknownOutcome = time.Hour, middleware.UnknownRelease },
		func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "k", Header: http.Header{"X-Which": {"first"}}}) }()
	<-firstStarted
	clk.Advance(2 * time.Hour)
	if w := serve(h, req{Key: "k", Header: http.Header{"X-Which": {"second"}}}); w.Code != 200 || w.Body.String() != "second" {
		t.Fatalf("second after lapse: %d %q", w.Code, w.Body)
	}
	close(releaseFirst)
	<-done
	if w := serve(h, req{Key: "k"}); w.Body.String() != "second" || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %q, want the newer holder's response", w.Body)
	}
	o := evs.Outcomes()
	if len(o) != 3 || o[0] != middleware.OutcomeStored || o[1] != middleware.OutcomeNotStored {
		t.Fatalf("outcomes %v: want the second stored, then the lapsed first not stored", o)
	}
	if evs.All()[1].Err == nil || !errors.Is(evs.All()[1].Err, cache.ErrClaimLost) {
		t.Fatalf("lapsed holder's error = %v, want ErrClaimLost", evs.All()[1].Err)
	}
}

// A lease that lapses (its instance stopped, or its store writes did) holds
// the key as an unknown outcome, by default: a retry gets the outcome-unknown
// answer and does not run; the first retry to find it reports the hold
// (OnHold, with the retry's request and the first execution's start); and a
// completion that lands after all replaces the held answer.
func TestLapsedLeaseIsHeld(t *testing.T) {
	clk := cachetest.NewClock()
	store := newMem(t, memstore.Options{Now: clk.Now})
	var evs events
	releaseFirst, firstStarted := make(chan struct{}), make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Which") == "first" {
			close(firstStarted)
			<-releaseFirst
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte(r.Header.Get("X-Which")))
	}}
	var holds []middleware.Held
	var mu sync.Mutex
	h := newHandler(t, store, func(s *middleware.Settings) {
		s.ClaimTTL = time.Hour // long in real time: no renewal fires; the fake clock lapses it
		s.Observer = evs.Observe
		s.FingerprintHeaders = nil
		s.OnHold = func(_ context.Context, held middleware.Held) error {
			mu.Lock()
			defer mu.Unlock()
			holds = append(holds, held)
			return nil
		}
	}).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "k", Header: http.Header{"X-Which": {"first"}}}) }()
	<-firstStarted
	claimed := clk.Now()
	clk.Advance(2 * time.Hour)
	for i := 0; i < 2; i++ {
		w := serve(h, req{Key: "k", Header: http.Header{"X-Which": {"retry"}}})
		checkProblem(t, w.Header(), w.Body.Bytes(), 504, middleware.ProblemOutcomeUnknown)
		if !strings.Contains(w.Body.String(), "stopped before its outcome was stored") {
			t.Fatalf("retry %d after the lapse: %s", i, w.Body)
		}
	}
	if w := serve(h, req{Key: "k", Body: "another request"}); w.Code != 422 {
		t.Fatalf("another request under the held key: %d, want 422", w.Code)
	}
	mu.Lock()
	if len(holds) != 1 || holds[0].Key != "k" || !holds[0].Sent.Equal(claimed) || holds[0].Request.Header.Get("X-Which") != "retry" {
		t.Fatalf("holds reported: %+v, want one, for the first retry, sent at the claim (%v)", holds, claimed)
	}
	mu.Unlock()
	if o := evs.Outcomes(); len(o) != 3 || o[0] != middleware.OutcomeUnknown || o[1] != middleware.OutcomeReplayed || o[2] != middleware.OutcomeMismatch {
		t.Fatalf("outcomes %v: want unknown (found the lapse), replayed, mismatch", o)
	}
	close(releaseFirst)
	<-done
	if w := serve(h, req{Key: "k"}); w.Code != 201 || w.Body.String() != "first" || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the first execution's late completion: %d %q, want its answer replayed", w.Code, w.Body)
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", c.Calls.Load())
	}
}
