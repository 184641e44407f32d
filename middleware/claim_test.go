package middleware_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
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
