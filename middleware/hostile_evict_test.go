package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// A claim the store refuses because it is full, with nothing this client may
// evict, is answered 503 with Retry-After and never passed through, even with
// fail_open: a client that can fill the store must not switch protection off.
// (Issue 24, finding 7.)
func TestFullStoreRefusedEvenWhenFailOpen(t *testing.T) {
	store := newMem(t, memstore.Options{MaxRecords: 2})
	// Two requests of other clients in flight fill the store: locks are never
	// evicted.
	for i := range 2 {
		if _, _, err := store.ClaimOrGet(context.Background(), fmt.Sprint("other-", i),
			cache.Claim{Token: fmt.Sprint("t", i), Fingerprint: "fp", Duration: time.Minute, Owner: fmt.Sprint("other-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var evs events
	c := &counter{}
	h := newHandler(t, store, func(s *middleware.Settings) { s.FailOpen = true }, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
	w := serve(h, req{Key: "k1", Header: http.Header{"Authorization": {"Bearer newcomer"}}})
	if w.Code != http.StatusServiceUnavailable || c.Calls.Load() != 0 {
		t.Fatalf("a full store under fail_open: %d, %d calls upstream; want 503 and none", w.Code, c.Calls.Load())
	}
	checkProblem(t, w.Header(), w.Body.Bytes(), http.StatusServiceUnavailable, middleware.ProblemStoreUnavailable)
	if o := evs.Outcomes(); len(o) != 1 || o[0] != middleware.OutcomeStoreError {
		t.Fatalf("outcomes %v, want store_error", o)
	}
}

// owners records the Owner of every claim.
type owners struct {
	cache.Store
	mu   sync.Mutex
	seen []string
}

func (o *owners) ClaimOrGet(ctx context.Context, key string, l cache.Claim) (*cache.Record, bool, error) {
	o.mu.Lock()
	o.seen = append(o.seen, l.Owner) // a wrapper reads the field: it is filled for it
	o.mu.Unlock()
	return o.Store.ClaimOrGet(ctx, key, l)
}

func (o *owners) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[len(o.seen)-1]
}

// Every claim names its client scope as Owner: 16 hex digits of a digest of
// exactly the store key's scope, the same for one client's keys, different
// for another client's, the credential never in it; a duplicate waiting for
// the first names the same owner.
func TestClaimsNameTheirScopeAsOwner(t *testing.T) {
	store := &owners{Store: newMem(t)}
	release := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}}
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 5 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = 5 * time.Millisecond }).Wrap(c)
	alice := http.Header{"Authorization": {"Bearer alice-secret"}}
	bob := http.Header{"Authorization": {"Bearer bob-secret"}}

	serve(h, req{Key: "a1", Header: alice})
	a1 := store.last()
	serve(h, req{Key: "a2", Header: alice})
	a2 := store.last()
	serve(h, req{Key: "a1", Header: bob})
	b1 := store.last()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(a1) || strings.Contains(a1, "alice") {
		t.Fatalf("owner %q: want 16 hex digits, never the credential", a1)
	}
	if a1 != a2 || a1 == b1 {
		t.Fatalf("owners: alice %q and %q, bob %q; want alice's equal and bob's apart", a1, a2, b1)
	}
	serve(h, req{Key: "a1", Header: alice, Target: "http://other.example/charge"})
	if store.last() == a1 {
		t.Fatal("another Host is another scope, and another owner")
	}

	// A duplicate that waits re-claims with the same owner.
	done := make(chan struct{})
	go func() { serve(h, req{Target: "/block", Key: "slow", Header: alice}); close(done) }()
	testutil.Eventually(t, 5*time.Second, "the first request running", func() bool { return c.Calls.Load() == 5 })
	dup := make(chan struct{})
	go func() { serve(h, req{Target: "/block", Key: "slow", Header: alice}); close(dup) }()
	testutil.Eventually(t, 5*time.Second, "the duplicate polling", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.seen) >= 8
	})
	close(release)
	<-done
	<-dup
	store.mu.Lock()
	defer store.mu.Unlock()
	for _, o := range store.seen[5:] {
		if o != a1 {
			t.Fatalf("the duplicate's claims name %q, want alice's %q (all: %q)", o, a1, store.seen)
		}
	}
}

// Through the core on the memory store: one client's flood of large responses
// never evicts another client's completed record, and its retry replays.
func TestAnotherClientsFloodDoesNotEvict(t *testing.T) {
	store := newMem(t, memstore.Options{MaxBytes: 256 << 10})
	big := strings.Repeat("x", 8<<10)
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		if r.URL.Path == "/big" {
			_, _ = w.Write([]byte(big))
		}
	}}
	h := newHandler(t, store).Wrap(c)
	victim := http.Header{"Authorization": {"Bearer victim"}}
	flooder := http.Header{"Authorization": {"Bearer flooder"}}
	if w := serve(h, req{Key: "charge", Header: victim}); w.Code != http.StatusCreated {
		t.Fatalf("victim: %d", w.Code)
	}
	for i := range 140 {
		if w := serve(h, req{Target: "/big", Key: fmt.Sprint("f", i), Header: flooder}); w.Code != http.StatusCreated {
			t.Fatalf("flood %d: %d", i, w.Code)
		}
	}
	calls := c.Calls.Load()
	w := serve(h, req{Key: "charge", Header: victim})
	if w.Header().Get("Idempotent-Replayed") != "true" || c.Calls.Load() != calls {
		t.Fatalf("the victim's retry after another client's flood: %d, replayed=%q, ran again=%v",
			w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load() != calls)
	}
}
