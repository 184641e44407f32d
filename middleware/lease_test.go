package middleware_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// The lease is renewed while next runs: the fake clock moves well past the lease,
// but only in steps shorter than it, each after a renewal.
func TestLeaseRenewalKeepsSlowRequestLocked(t *testing.T) {
	clk := cachetest.NewClock()
	store := &flaky{Store: newMem(t, memstore.WithClock(clk.Now)), extends: make(chan struct{}, 1)}
	const lease = 30 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release; w.WriteHeader(200) }}
	h := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = lease }).Wrap(c)
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

// A holder whose lease lapsed (no renewal got through) cannot overwrite the newer
// holder's record.
func TestLapsedLeaseOldHolderCannotOverwrite(t *testing.T) {
	clk := cachetest.NewClock()
	store := newMem(t, memstore.WithClock(clk.Now))
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
	h := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = time.Hour }, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
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
	if evs.All()[1].Err == nil || !errors.Is(evs.All()[1].Err, cache.ErrLockLost) {
		t.Fatalf("lapsed holder's error = %v, want ErrLockLost", evs.All()[1].Err)
	}
}
