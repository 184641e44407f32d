package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
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
	store := &flaky{Store: newMem(t, memstore.Options{Now: clk.Now}), extends: make(chan struct{}, 1)}
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

// Under unknown_outcome release, a holder whose lease lapsed (no renewal got
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
	h := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL, s.UnknownOutcome = time.Hour, middleware.UnknownRelease },
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
	if evs.All()[1].Err == nil || !errors.Is(evs.All()[1].Err, cache.ErrLockLost) {
		t.Fatalf("lapsed holder's error = %v, want ErrLockLost", evs.All()[1].Err)
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
		s.LockTTL = time.Hour // long in real time: no renewal fires; the fake clock lapses it
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
