package cachetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// hold is how long a lapsed claim stays held in these tests.
const hold = 10 * time.Minute

// claimHeld claims key with a claim that is held for hold once its claim lapses.
func claimHeld(t *testing.T, s cache.Store, key, fp string) string {
	t.Helper()
	tok := Token()
	rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: fp, Duration: lease, Hold: hold, Trace: []byte("tr")})
	if err != nil || loaded {
		t.Fatalf("ClaimOrGet(%s): loaded=%v rec=%+v err=%v", key, loaded, rec, err)
	}
	return tok
}

// claimAs makes a claim with tok and fp (and a hold), which must find a record.
func claimAs(t *testing.T, s cache.Store, key, tok, fp string) *cache.Record {
	t.Helper()
	rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: fp, Duration: lease, Hold: hold})
	if err != nil || !loaded || rec == nil {
		t.Fatalf("ClaimOrGet(%s) by %s: claimed a held key (loaded=%v rec=%+v err=%v)", key, tok, loaded, rec, err)
	}
	return rec
}

// wantLapsed checks rec is the held view of a lapsed claim.
func wantLapsed(t *testing.T, what string, rec *cache.Record, fp string, found bool) {
	t.Helper()
	switch {
	case rec.State != cache.StateCompleted || rec.Response == nil || !rec.Response.Unknown || !rec.Lapsed:
		t.Fatalf("%s: %+v (response %+v), want a held unknown outcome from a lapsed lease", what, rec, rec.Response)
	case rec.Response.Status != cache.LapsedStatus:
		t.Fatalf("%s: status %d, want %d", what, rec.Response.Status, cache.LapsedStatus)
	case rec.Fingerprint != fp:
		t.Fatalf("%s: fingerprint %q, want the lock's %q", what, rec.Fingerprint, fp)
	case rec.Found != found:
		t.Fatalf("%s: Found = %v, want %v", what, rec.Found, found)
	case string(rec.Response.Trace) != "tr":
		t.Fatalf("%s: trace %q, want the lock's", what, rec.Response.Trace)
	}
}

// testLapsedLockHeld: a claim that lapsed is a held unknown outcome for
// its hold: every claim gets it, none runs; the first claim with the claim's
// fingerprint finds it (and a re-sent call of that claim does again), a claim
// with another fingerprint does not; Get reads it so. After the hold the key
// is free.
func testLapsedLockHeld(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	claimHeld(t, h.Store, key, "fp")
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight || rec.Lapsed || rec.Found {
		t.Fatalf("live lock reads as %+v", rec)
	}
	h.Clock.Advance(lease + time.Second)

	wantLapsed(t, "a claim with another fingerprint", claimAs(t, h.Store, key, Token(), "other"), "fp", false)
	finder := Token()
	wantLapsed(t, "the first claim with the fingerprint", claimAs(t, h.Store, key, finder, "fp"), "fp", true)
	wantLapsed(t, "the same claim re-sent", claimAs(t, h.Store, key, finder, "fp"), "fp", true)
	wantLapsed(t, "a later claim", claimAs(t, h.Store, key, Token(), "fp"), "fp", false)
	rec, err := h.Store.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	wantLapsed(t, "Get", rec, "fp", false)
	if end := rec.ExpiresAt.Sub(h.Clock.Now()); end < hold-2*time.Minute || end > hold {
		t.Fatalf("the hold ends in %v, want about %v", end, hold-time.Second)
	}

	h.Clock.Advance(hold - 2*time.Second)
	wantLapsed(t, "a claim just before the hold ends", claimAs(t, h.Store, key, Token(), "fp"), "fp", false)
	h.Clock.Advance(2 * time.Second)
	if _, err := h.Store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after the hold: err = %v, want ErrNotFound", err)
	}
	claimHeld(t, h.Store, key, "fp") // free again
}

// testLapsedLockSettledByItsToken: a completion that lands after the claim
// lapsed replaces the held record, found or not; a release frees it; no other
// token writes to it, and nobody extends it.
func testLapsedLockSettledByItsToken(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, found := range []bool{false, true} {
		key := Key(t, "complete")
		tok := claimHeld(t, h.Store, key, "fp")
		h.Clock.Advance(lease + time.Second)
		if found {
			wantLapsed(t, "found", claimAs(t, h.Store, key, Token(), "fp"), "fp", true)
		}
		other := Token()
		if err := h.Store.Extend(ctx, key, tok, lease); !errors.Is(err, cache.ErrClaimLost) {
			t.Fatalf("Extend of a lapsed lock: err = %v, want ErrClaimLost (never revived)", err)
		}
		if err := h.Store.Complete(ctx, key, other, completed(200, "other"), ttl); !errors.Is(err, cache.ErrClaimLost) {
			t.Fatalf("another token's Complete over the held lock: err = %v, want ErrClaimLost", err)
		}
		if err := h.Store.Release(ctx, key, other); !errors.Is(err, cache.ErrClaimLost) {
			t.Fatalf("another token's Release of the held lock: err = %v, want ErrClaimLost", err)
		}
		late := completed(201, "late")
		late.Fingerprint = "ignored: the lock's is kept"
		if err := h.Store.Complete(ctx, key, tok, late, ttl); err != nil {
			t.Fatalf("the lock's own late Complete (found=%v): %v", found, err)
		}
		got := mustLoad(t, h.Store, key)
		if got.State != cache.StateCompleted || got.Lapsed || got.Response.Unknown || string(got.Response.Body) != "late" || got.Fingerprint != "fp" {
			t.Fatalf("after the late Complete (found=%v): %+v %+v", found, got, got.Response)
		}
		if d := got.ExpiresAt.Sub(h.Clock.Now()); d < ttl-time.Minute || d > ttl+time.Minute {
			t.Fatalf("the completed record expires in %v, want about %v", d, ttl)
		}
		if err := h.Store.Complete(ctx, key, tok, late, ttl); err != nil {
			t.Fatalf("the late Complete re-sent: %v", err)
		}

		key = Key(t, "release")
		tok = claimHeld(t, h.Store, key, "fp")
		h.Clock.Advance(lease + time.Second)
		if found {
			wantLapsed(t, "found", claimAs(t, h.Store, key, Token(), "fp"), "fp", true)
		}
		if err := h.Store.Release(ctx, key, tok); err != nil {
			t.Fatalf("the lock's own late Release (found=%v): %v", found, err)
		}
		if err := h.Store.Release(ctx, key, tok); err != nil {
			t.Fatalf("the late Release re-sent: %v", err)
		}
		claimHeld(t, h.Store, key, "fp") // free again
	}
}

// testLapsedLockResolved: an operator (or reconcile) settles a lapsed claim as
// any held unknown outcome; a live claim is no unknown outcome; Delete frees it.
func testLapsedLockResolved(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "resolve")
	tok := claimHeld(t, h.Store, key, "fp")
	if err := h.Store.Resolve(ctx, key, nil, 0); !errors.Is(err, cache.ErrNotUnknown) {
		t.Fatalf("Resolve of a live lock: err = %v, want ErrNotUnknown", err)
	}
	h.Clock.Advance(lease + time.Second)
	want := &cache.Response{Status: 200, Body: []byte("settled"), BodySize: 7}
	if err := h.Store.Resolve(ctx, key, want, ttl); err != nil {
		t.Fatalf("Resolve of a lapsed lock: %v", err)
	}
	got := mustLoad(t, h.Store, key)
	if got.State != cache.StateCompleted || got.Lapsed || got.Response.Unknown || string(got.Response.Body) != "settled" || got.Fingerprint != "fp" {
		t.Fatalf("resolved: %+v %+v", got, got.Response)
	}
	// The first execution's completion, landing after the resolution, does not
	// overwrite what the operator decided.
	if err := h.Store.Complete(ctx, key, tok, completed(201, "late"), ttl); err == nil {
		if got := mustLoad(t, h.Store, key); string(got.Response.Body) != "settled" {
			t.Fatalf("a late Complete overwrote the resolution: %q", got.Response.Body)
		}
	} else if !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("late Complete after Resolve: %v", err)
	}

	key = Key(t, "release")
	claimHeld(t, h.Store, key, "fp")
	h.Clock.Advance(lease + time.Second)
	if err := h.Store.Resolve(ctx, key, nil, 0); err != nil {
		t.Fatalf("Resolve(nil) of a lapsed lock: %v", err)
	}
	claimHeld(t, h.Store, key, "fp") // free again

	key = Key(t, "delete")
	claimHeld(t, h.Store, key, "fp")
	h.Clock.Advance(lease + time.Second)
	if err := h.Store.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of a lapsed lock: %v", err)
	}
	claimHeld(t, h.Store, key, "fp") // free again
}

// testHoldMovesWithTheLease: the hold counts from the claim's end, which
// Extend moves.
func testHoldMovesWithTheLease(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claimHeld(t, h.Store, key, "fp")
	h.Clock.Advance(lease / 2)
	if err := h.Store.Extend(ctx, key, tok, lease); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	h.Clock.Advance(lease/2 + time.Second) // past the first lease's end
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("extended lock reads as %+v", rec)
	}
	h.Clock.Advance(lease/2 + hold - 2*time.Second) // the extended claim lapsed: held
	wantLapsed(t, "just before the extended hold ends", claimAs(t, h.Store, key, Token(), "other"), "fp", false)
	h.Clock.Advance(2 * time.Second)
	claimHeld(t, h.Store, key, "fp") // the hold, counted from the extended lease, ended
}
