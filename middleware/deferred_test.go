package middleware_test

import (
	"context"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// fieldReader is a store wrapper written against cache.Claim's fields: it
// reads Owner and Info, never Deferred, ScopeOwner or EncodedInfo, and does
// not say it does (cache.DeferredClaims), so the middleware fills them.
type fieldReader struct {
	cache.Store
	mu            sync.Mutex
	owner, info   string
	key           string
	stripDeferred bool // a store that predates Deferred keeps only the fields
}

func (f *fieldReader) ClaimOrGet(ctx context.Context, key string, l cache.Claim) (*cache.Record, bool, error) {
	f.mu.Lock()
	f.owner, f.info, f.key = l.Owner, l.Info, key
	f.mu.Unlock()
	if f.stripDeferred {
		l.Deferred = nil
	}
	return f.Store.ClaimOrGet(ctx, key, l)
}

// The Owner doc says the middleware passes 16 hex digits of the scope's
// digest, and Info is the request's encoded info: a store (or wrapper)
// reading the exported fields on a first execution's claim must see them.
func TestClaimFieldsFilledForAStoreThatReadsThem(t *testing.T) {
	store := &fieldReader{Store: newMem(t)}
	h := newHandler(t, store).Wrap(&counter{})
	if w := serve(h, req{Key: "k1", Header: http.Header{"Authorization": {"Bearer alice"}}}); w.Code != http.StatusCreated {
		t.Fatalf("status %d", w.Code)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(store.owner) {
		t.Errorf("Claim.Owner = %q on a first execution's claim; want 16 hex digits (cache.Claim.Owner doc)", store.owner)
	}
	if info, err := cache.DecodeInfo(store.info); err != nil || info == nil || info.Method != http.MethodPost {
		t.Errorf("Claim.Info = %q (%+v, %v) on a first execution's claim; want the encoded request", store.info, info, err)
	}
}

// A store that keeps only Claim.Info (it predates Deferred): the in-flight
// record has the request info, built from the request as it came, not as the
// handler left it.
func TestInfoBuiltBeforeTheHandlerForAFieldOnlyStore(t *testing.T) {
	store := &fieldReader{Store: newMem(t), stripDeferred: true}
	var inFlight *cache.Record
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		store.mu.Lock()
		key := store.key
		store.mu.Unlock()
		inFlight, _ = store.Get(context.Background(), key)
		r.Header.Set("X-Request-Id", "set-by-handler") // e.g. a request-id middleware downstream
		w.WriteHeader(http.StatusCreated)
	}}
	h := newHandler(t, store).Wrap(c)
	serve(h, req{Key: "k1", Header: http.Header{"X-Request-Id": {"client-req-1"}}})
	if info, _ := cache.DecodeInfo(inFlight.Info); info == nil || info.RequestID != "client-req-1" {
		t.Errorf("in-flight record's info %+v; want request id client-req-1", info)
	}
	rec, err := store.Get(context.Background(), store.key)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := cache.InfoOf(rec); info == nil || info.RequestID != "client-req-1" {
		t.Errorf("completed record's info %+v; want request id client-req-1 (as it came in)", info)
	}
}

type keyCapture struct {
	*memstore.Store
	mu  sync.Mutex
	key string
}

func (k *keyCapture) ClaimOrGet(ctx context.Context, key string, l cache.Claim) (*cache.Record, bool, error) {
	k.mu.Lock()
	k.key = key
	k.mu.Unlock()
	return k.Store.ClaimOrGet(ctx, key, l)
}

// A duplicate that waits for the first execution is answered after the
// record completes, and its replay is counted then: LastReplay ("when the
// latest was") never precedes the answer it replayed.
func TestWaitersReplayCountedWhenAnswered(t *testing.T) {
	mem := newMem(t)
	store := &keyCapture{Store: mem} // keeps the memory store's ReplayCounter and InProcess
	release := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	}}
	h := newHandler(t, store, func(s *middleware.Settings) { s.Wait = 5 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = 5 * time.Millisecond }).Wrap(c)
	done := make(chan struct{})
	go func() { serve(h, req{Key: "slow"}); close(done) }()
	testutil.Eventually(t, 5*time.Second, "the first running", func() bool { return c.Calls.Load() == 1 })
	dup := make(chan int)
	go func() { dup <- serve(h, req{Key: "slow"}).Code }()
	time.Sleep(100 * time.Millisecond) // the duplicate is waiting
	completed := time.Now()
	close(release)
	<-done
	if code := <-dup; code != http.StatusCreated {
		t.Fatalf("duplicate %d; want the replayed 201", code)
	}
	store.mu.Lock()
	key := store.key
	store.mu.Unlock()
	rec, err := mem.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Replays != 1 || rec.LastReplay.Before(completed) {
		t.Fatalf("replays %d, last %v; want 1, at or after the completion %v (%v before it)", rec.Replays, rec.LastReplay, completed, completed.Sub(rec.LastReplay))
	}
}
