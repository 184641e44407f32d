package cachetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

func testWrongTokenFenced(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	wrong := Token()
	if err := h.Store.Complete(ctx, key, wrong, completed(200, "x"), ttl); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Complete with wrong token: err = %v, want ErrClaimLost", err)
	}
	if err := h.Store.Release(ctx, key, wrong); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Release with wrong token: err = %v, want ErrClaimLost", err)
	}
	if err := h.Store.Extend(ctx, key, wrong, lease); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Extend with wrong token: err = %v, want ErrClaimLost", err)
	}
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("wrong-token writes changed the record: %+v", rec)
	}
	if err := h.Store.Complete(ctx, key, tok, completed(200, "ok"), ttl); err != nil {
		t.Fatalf("Complete with right token: %v", err)
	}
	missing := Key(t, "missing")
	if err := h.Store.Extend(ctx, missing, tok, lease); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Extend on missing key: err = %v, want ErrClaimLost", err)
	}
	// Release is idempotent: a key nobody holds is free, as a Release wants it
	// (this is also what a re-sent Release finds after a lost reply).
	if err := h.Store.Release(ctx, missing, tok); err != nil {
		t.Fatalf("Release on missing key: err = %v, want success", err)
	}
}

func testLapsedLeaseFenced(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	old := claim(t, h.Store, key, "fp")
	h.Clock.Advance(lease + time.Second)

	// The lapsed holder cannot extend or complete, even before anyone else claims.
	if err := h.Store.Extend(ctx, key, old, lease); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Extend after lapse: err = %v, want ErrClaimLost", err)
	}
	newer := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, old, completed(200, "stale"), ttl); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("stale Complete: err = %v, want ErrClaimLost", err)
	}
	if err := h.Store.Release(ctx, key, old); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("stale Release: err = %v, want ErrClaimLost", err)
	}
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("stale writes touched the newer lock: %+v", rec)
	}
	if err := h.Store.Complete(ctx, key, newer, completed(200, "fresh"), ttl); err != nil {
		t.Fatalf("newer Complete: %v", err)
	}
	if got := mustLoad(t, h.Store, key).Response; string(got.Body) != "fresh" {
		t.Fatalf("body = %q, want fresh", got.Body)
	}
}

func testExtendKeepsLock(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	for i := 0; i < 3; i++ {
		h.Clock.Advance(lease / 2)
		if err := h.Store.Extend(ctx, key, tok, lease); err != nil {
			t.Fatalf("Extend %d: %v", i, err)
		}
	}
	// 1.5 leases have passed since the claim; the claim still holds.
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("state = %v, want in_flight", rec.State)
	}
	if err := h.Store.Complete(ctx, key, tok, completed(200, "ok"), ttl); err != nil {
		t.Fatalf("Complete after extensions: %v", err)
	}
}

func testNoWritesAfterComplete(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, completed(200, "first"), ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// A re-sent Complete (a lost reply) succeeds and changes nothing.
	if err := h.Store.Complete(ctx, key, tok, completed(200, "second"), ttl); err != nil {
		t.Fatalf("second Complete with the same token: err = %v, want success", err)
	}
	if err := h.Store.Complete(ctx, key, "another-token", completed(200, "third"), ttl); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Complete with another token: err = %v, want ErrClaimLost", err)
	}
	if err := h.Store.Release(ctx, key, tok); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Release after Complete: err = %v, want ErrClaimLost", err)
	}
	if err := h.Store.Extend(ctx, key, tok, lease); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Extend after Complete: err = %v, want ErrClaimLost", err)
	}
	if got := mustLoad(t, h.Store, key).Response; string(got.Body) != "first" {
		t.Fatalf("body = %q, want first", got.Body)
	}
}

// raceClaim has n goroutines claim key at once and returns how many won.
func raceClaim(t *testing.T, s cache.Store, key string, n int) (winners int, winToken string) {
	t.Helper()
	type result struct {
		tok    string
		loaded bool
		err    error
	}
	results := make(chan result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := Token()
			<-start
			_, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: lease})
			results <- result{tok, loaded, err}
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Errorf("ClaimOrGet: %v", r.err)
			continue
		}
		if !r.loaded {
			winners++
			winToken = r.tok
		}
	}
	return winners, winToken
}

func testRaceOneWinner(t *testing.T, h Harness) {
	const n = 100
	for round := 0; round < 5; round++ {
		key := Key(t, fmt.Sprint(round))
		if winners, _ := raceClaim(t, h.Store, key, n); winners != 1 {
			t.Fatalf("round %d: %d of %d goroutines claimed the key, want exactly 1", round, winners, n)
		}
	}
}

func testRaceAfterRelease(t *testing.T, h Harness) {
	key := Key(t, "k")
	const n = 50
	for round := 0; round < 3; round++ {
		winners, tok := raceClaim(t, h.Store, key, n)
		if winners != 1 {
			t.Fatalf("round %d: %d winners, want 1", round, winners)
		}
		if err := h.Store.Release(context.Background(), key, tok); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
	}
}

// Every operation is idempotent for its token: a client library that re-sends a
// call after a lost reply gets the answer of the first, never a conflict with
// itself.
func testIdempotentForToken(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	lock := cache.Claim{Token: Token(), Fingerprint: "fp", Duration: lease}
	for i := range 2 {
		rec, loaded, err := h.Store.ClaimOrGet(ctx, key, lock)
		if err != nil || loaded {
			t.Fatalf("claim #%d with the same token: loaded=%v rec=%+v err=%v; want claimed", i+1, loaded, rec, err)
		}
	}
	if _, loaded, _ := h.Store.ClaimOrGet(ctx, key, cache.Claim{Token: Token(), Fingerprint: "fp", Duration: lease}); !loaded {
		t.Fatal("another token claimed a held key")
	}
	for i := range 2 {
		if err := h.Store.Extend(ctx, key, lock.Token, lease); err != nil {
			t.Fatalf("Extend #%d: %v", i+1, err)
		}
	}
	for i := range 2 {
		if err := h.Store.Complete(ctx, key, lock.Token, completed(201, "done"), ttl); err != nil {
			t.Fatalf("Complete #%d: %v", i+1, err)
		}
	}
	if got := mustLoad(t, h.Store, key); got.State != cache.StateCompleted || string(got.Response.Body) != "done" {
		t.Fatalf("after two Completes: %+v", got)
	}
	// A claim re-sent after the Complete sees the completed record.
	if rec, loaded, err := h.Store.ClaimOrGet(ctx, key, lock); err != nil || !loaded || rec.State != cache.StateCompleted {
		t.Fatalf("claim after Complete: loaded=%v rec=%+v err=%v; want the completed record", loaded, rec, err)
	}

	other := Key(t, "released")
	tok := claim(t, h.Store, other, "fp")
	for i := range 2 {
		if err := h.Store.Release(ctx, other, tok); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	newer := claim(t, h.Store, other, "fp") // the key is free
	if err := h.Store.Release(ctx, other, tok); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("a late Release of the old token after another claim: err = %v, want ErrClaimLost", err)
	}
	if rec := mustLoad(t, h.Store, other); rec.State != cache.StateInFlight {
		t.Fatalf("the late Release touched the newer claim (%s): %+v", newer, rec)
	}
}

// A Complete that comes after its claim lapsed (a store outage longer than the
// lease) still stores the response while nobody else has claimed the key: the
// key is free, and the operation did run. Once another claim holds the key, it
// is fenced out (testLapsedLeaseFenced).
func testLateCompleteOnAFreeKey(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp-late")
	h.Clock.Advance(lease + time.Second)
	rec := completed(201, "late")
	rec.Fingerprint = "fp-late"
	if err := h.Store.Complete(ctx, key, tok, rec, ttl); err != nil {
		t.Fatalf("Complete after the lease lapsed, nobody else claiming: %v", err)
	}
	got := mustLoad(t, h.Store, key)
	if got.State != cache.StateCompleted || string(got.Response.Body) != "late" || got.Fingerprint != "fp-late" {
		t.Fatalf("late Complete stored %+v", got)
	}
	if err := h.Store.Complete(ctx, key, tok, rec, ttl); err != nil {
		t.Fatalf("the same late Complete re-sent: %v", err)
	}
	// On a key with no record at all (swept, or purged by an operator).
	gone := Key(t, "gone")
	if err := h.Store.Complete(ctx, gone, Token(), rec, ttl); err != nil {
		t.Fatalf("Complete on a missing key: %v", err)
	}
	if got := mustLoad(t, h.Store, gone); got.State != cache.StateCompleted || got.Fingerprint != "fp-late" {
		t.Fatalf("Complete on a missing key stored %+v", got)
	}
}
