package cachetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Instances are two instances of a store sharing one backend, each with a
// local cache of completed records (Options.LocalCache; run them at its
// default), on the backend's own clock: the cache's expiry is real time.
type Instances struct {
	A, B cache.Store
	// Drop deletes key in the backend behind the stores' backs (no
	// announcement), so that an answer for it can only come from a cache.
	Drop func(t *testing.T, key string)
	// Cut breaks the instances' subscriptions to the channel that announces
	// changes (Redis: CLIENT KILL TYPE pubsub; PostgreSQL:
	// pg_terminate_backend of the LISTEN connections).
	Cut func(t *testing.T)
}

// cacheWarm is how long a new cache waits before each promise is tested: its
// subscription is set up meanwhile (it trusts itself once a claim consulted it
// and that claim's ping came back).
const cacheWarm = 500 * time.Millisecond

// RunLocalCache runs the local cache's promises across two instances: a
// delete or a resolve through one reaches the other's cache before it answers
// again, also when the channel that announces it was just cut; unknown outcomes and in-flight claims are never cached; an entry
// expires with its record; a retry with another fingerprint still sees the
// first one's (the middleware answers 422); the instance that completed a
// record answers it from its cache with no read, and still hears of a delete
// through the other.
func RunLocalCache(t *testing.T, newInstances func(t *testing.T) Instances) {
	tests := []struct {
		name string
		fn   func(t *testing.T, in Instances)
	}{
		{"DeleteViaOtherInstance", testCacheDeleteViaOther},
		{"ResolveViaOtherInstance", testCacheResolveViaOther},
		{"InFlightNotCached", testCacheInFlight},
		{"ExpiresWithRecord", testCacheExpiry},
		{"MismatchStillSeen", testCacheMismatch},
		{"ChannelCut", testCacheChannelCut},
		{"CompletedKeptByItsInstance", testCacheCompleteKept},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := newInstances(t)
			time.Sleep(cacheWarm)
			tc.fn(t, in)
		})
	}
}

func claimOrGet(t *testing.T, s cache.Store, key, fp string) (*cache.Record, bool) {
	t.Helper()
	rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: Token(), Fingerprint: fp, Duration: lease})
	if err != nil {
		t.Fatalf("ClaimOrGet(%s): %v", key, err)
	}
	return rec, loaded
}

// cached completes key through in.A with rec and ttl, has A read it (which
// keeps it), and proves A answers it from its cache: a second key stored and
// read the same way until a read is answered from the cache, then dropped in
// the backend, is still answered.
func cached(t *testing.T, in Instances, key string, rec *cache.Record, ttl time.Duration) {
	t.Helper()
	probe := key + ":probe"
	for _, k := range []string{key, probe} {
		tok := claim(t, in.A, k, rec.Fingerprint)
		// The completion's own announcement, once it arrives, drops the key
		// and spoils a read in flight: wait for it, as a waiter would.
		changed, cancel := in.A.(cache.Notifier).Subscribe(k)
		if err := in.A.Complete(context.Background(), k, tok, rec, ttl); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, changed, "Complete")
		cancel()
		if _, loaded := claimOrGet(t, in.A, k, rec.Fingerprint); !loaded {
			t.Fatalf("%s: not found after Complete", k)
		}
	}
	// A cache trusts itself only once a ping sent after a claim consulted it
	// came back: read until one read is a hit.
	stats := func() cache.LocalCacheStats {
		lc, ok := in.A.(cache.LocalCacher)
		if !ok {
			t.Fatal("A keeps no local cache")
		}
		st, _ := lc.LocalCacheStats()
		return st
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		before := stats().Hits
		claimOrGet(t, in.A, probe, rec.Fingerprint)
		if stats().Hits > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A answered nothing from its local cache for 5s: %+v", stats())
		}
	}
	in.Drop(t, probe)
	if _, loaded := claimOrGet(t, in.A, probe, rec.Fingerprint); !loaded {
		t.Fatalf("A did not answer a completed record from its local cache: %+v", stats())
	}
}

func testCacheDeleteViaOther(t *testing.T, in Instances) {
	key := Key(t, "k")
	cached(t, in, key, completed(201, "first"), ttl)
	if err := in.B.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if rec, loaded := claimOrGet(t, in.A, key, "fp"); loaded {
		t.Fatalf("after a delete through B, A still answered the deleted record: %d %q", rec.Response.Status, rec.Response.Body)
	}
}

func testCacheResolveViaOther(t *testing.T, in Instances) {
	for _, del := range []bool{false, true} {
		key := Key(t, "k")
		unknown := completed(502, "outcome unknown")
		unknown.Response.Unknown = true
		cached(t, in, key+":warm", completed(200, "x"), ttl) // A trusts its cache
		tok := claim(t, in.A, key, "fp")
		if err := in.A.Complete(context.Background(), key, tok, unknown, ttl); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // a read that would keep it, then one that would answer it
			if rec, loaded := claimOrGet(t, in.A, key, "fp"); !loaded || !rec.Response.Unknown {
				t.Fatalf("the unknown outcome: loaded=%v %+v", loaded, rec)
			}
		}
		var resolved *cache.Response
		if !del {
			resolved = &cache.Response{Status: 201, Body: []byte("settled")}
		}
		if err := in.B.Resolve(context.Background(), key, resolved, ttl); err != nil {
			t.Fatal(err)
		}
		rec, loaded := claimOrGet(t, in.A, key, "fp")
		switch {
		case del && loaded:
			t.Fatalf("after B resolved by deleting, A answered %d %q", rec.Response.Status, rec.Response.Body)
		case !del && (!loaded || rec.Response.Unknown || rec.Response.Status != 201):
			t.Fatalf("after B resolved with 201, A answered loaded=%v %+v", loaded, rec)
		}
	}
}

func testCacheInFlight(t *testing.T, in Instances) {
	key := Key(t, "k")
	cached(t, in, key+":warm", completed(200, "x"), ttl)
	tok := claim(t, in.B, key, "fp")
	for i := 0; i < 2; i++ {
		if rec, loaded := claimOrGet(t, in.A, key, "fp"); !loaded || rec.State != cache.StateInFlight {
			t.Fatalf("the lock in flight: loaded=%v %+v", loaded, rec)
		}
	}
	if err := in.B.Complete(context.Background(), key, tok, completed(201, "done"), ttl); err != nil {
		t.Fatal(err)
	}
	if rec, loaded := claimOrGet(t, in.A, key, "fp"); !loaded || rec.State != cache.StateCompleted || string(rec.Response.Body) != "done" {
		t.Fatalf("after B completed, A answered loaded=%v %+v", loaded, rec)
	}
}

// The cache is kept in use meanwhile (it pings only then), so that it is
// still trusted when the record expires: its entry's expiry, not a lapsed
// trust, is what must stop it answering.
func testCacheExpiry(t *testing.T, in Instances) {
	key := Key(t, "k")
	warm := key + ":warm"
	cached(t, in, warm, completed(200, "x"), ttl) // warm's probe is in A's cache only
	const life = 1500 * time.Millisecond
	start := time.Now()
	cached(t, in, key, completed(201, "short-lived"), life)
	if time.Since(start) > life/2 {
		t.Skip("the machine is too slow to cache a record within half its life")
	}
	for time.Now().Before(start.Add(life + 100*time.Millisecond)) {
		claimOrGet(t, in.A, warm+":probe", "fp")
		time.Sleep(10 * time.Millisecond)
	}
	if _, loaded := claimOrGet(t, in.A, warm+":probe", "fp"); !loaded {
		t.Skip("A's cache was not trusted when the record expired (a slow machine): nothing to check")
	}
	if rec, loaded := claimOrGet(t, in.A, key, "fp"); loaded {
		t.Fatalf("A answered a record past its TTL: %d %q", rec.Response.Status, rec.Response.Body)
	}
}

func testCacheMismatch(t *testing.T, in Instances) {
	key := Key(t, "k")
	cached(t, in, key, completed(201, "first"), ttl)
	in.Drop(t, key) // only A's cache has it now
	rec, loaded := claimOrGet(t, in.A, key, "another-body")
	if !loaded || rec.Fingerprint != "fp" {
		t.Fatalf("a retry with another body: loaded=%v %+v, want the cached record with the first fingerprint", loaded, rec)
	}
	// The caller's copy is its own: changing it does not change the cache.
	rec.Fingerprint, rec.Response.Body[0] = "changed", 'X'
	if rec, _ := claimOrGet(t, in.A, key, "fp"); rec.Fingerprint != "fp" || string(rec.Response.Body) != "first" {
		t.Fatalf("the cache kept a caller's change: %+v", rec)
	}
}

// The channel that announces changes is cut, then a record A holds in its
// cache is deleted through B, whose announcement A may never hear: A answers
// it no more once the delete returned. Once subscribed again, A answers from
// its cache again.
func testCacheChannelCut(t *testing.T, in Instances) {
	key := Key(t, "k")
	cached(t, in, key, completed(201, "first"), ttl)
	in.Cut(t)
	if err := in.B.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if rec, loaded := claimOrGet(t, in.A, key, "fp"); loaded && rec.State == cache.StateCompleted {
			t.Fatalf("after the channel was cut and B deleted the record, A answered it: %d %q", rec.Response.Status, rec.Response.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Back: a record is answered from the cache again, within a few seconds.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		k := Key(t, fmt.Sprint("again", i))
		tok := claim(t, in.A, k, "fp")
		if err := in.A.Complete(context.Background(), k, tok, completed(201, "again"), ttl); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // past the completion's own announcement, if any
		claimOrGet(t, in.A, k, "fp")       // kept, when the cache is trusted again
		in.Drop(t, k)
		if _, loaded := claimOrGet(t, in.A, k, "fp"); loaded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("A's cache answered nothing for 10s after its subscription was cut")
		}
	}
}

// The instance that completes a record keeps it: its first claim of the key
// is answered from its cache (the record dropped behind its back is still
// answered), on a cache that no claim consulted before (the Complete carried
// its ping). A delete through B still reaches it, and an unknown outcome is
// not kept.
func testCacheCompleteKept(t *testing.T, in Instances) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, in.A, key, "fp")
	if err := in.A.Complete(ctx, key, tok, completed(201, "first"), ttl); err != nil {
		t.Fatal(err)
	}
	in.Drop(t, key)
	rec, loaded := claimOrGet(t, in.A, key, "fp")
	if !loaded || rec.State != cache.StateCompleted || rec.Response.Status != 201 || string(rec.Response.Body) != "first" {
		t.Fatalf("the completing instance's first claim was not answered from its cache: loaded=%v %+v", loaded, rec)
	}
	if rec.Fingerprint != "fp" || rec.Version != cache.FormatVersion || rec.ExpiresAt.IsZero() {
		t.Fatalf("the kept record is not what a read returns: %+v", rec)
	}

	deleted := Key(t, "k")
	tok = claim(t, in.A, deleted, "fp")
	if err := in.A.Complete(ctx, deleted, tok, completed(201, "first"), ttl); err != nil {
		t.Fatal(err)
	}
	if err := in.B.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	if rec, loaded := claimOrGet(t, in.A, deleted, "fp"); loaded {
		t.Fatalf("after a delete through B, A answered the record it completed: %d %q", rec.Response.Status, rec.Response.Body)
	}

	unknown := Key(t, "k")
	tok = claim(t, in.A, unknown, "fp")
	held := completed(502, "outcome unknown")
	held.Response.Unknown = true
	if err := in.A.Complete(ctx, unknown, tok, held, ttl); err != nil {
		t.Fatal(err)
	}
	in.Drop(t, unknown)
	if rec, loaded := claimOrGet(t, in.A, unknown, "fp"); loaded {
		t.Fatalf("A kept the unknown outcome it completed: %+v", rec)
	}
}
