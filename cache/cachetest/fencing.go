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
	if err := h.Store.Complete(ctx, key, wrong, completed(200, "x"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Complete with wrong token: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, wrong); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Release with wrong token: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, key, wrong, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend with wrong token: err = %v, want ErrLockLost", err)
	}
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("wrong-token writes changed the record: %+v", rec)
	}
	if err := h.Store.Complete(ctx, key, tok, completed(200, "ok"), ttl); err != nil {
		t.Fatalf("Complete with right token: %v", err)
	}
	// Operations on a key nobody holds are fenced too.
	missing := Key(t, "missing")
	if err := h.Store.Complete(ctx, missing, tok, completed(200, "x"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Complete on missing key: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, missing, tok, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend on missing key: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, missing, tok); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Release on missing key: err = %v, want ErrLockLost", err)
	}
}

func testLapsedLeaseFenced(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	old := claim(t, h.Store, key, "fp")
	h.Clock.Advance(lease + time.Second)

	// The lapsed holder cannot extend or complete, even before anyone else claims.
	if err := h.Store.Extend(ctx, key, old, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend after lapse: err = %v, want ErrLockLost", err)
	}
	newer := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, old, completed(200, "stale"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("stale Complete: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, old); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("stale Release: err = %v, want ErrLockLost", err)
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
	// 1.5 leases have passed since the claim; the lock still holds.
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
	if err := h.Store.Complete(ctx, key, tok, completed(200, "second"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("second Complete: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, tok); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Release after Complete: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, key, tok, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend after Complete: err = %v, want ErrLockLost", err)
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
			_, loaded, err := s.LockOrGet(context.Background(), key, cache.Lock{Token: tok, Fingerprint: "fp", Lease: lease})
			results <- result{tok, loaded, err}
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Errorf("LockOrGet: %v", r.err)
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
