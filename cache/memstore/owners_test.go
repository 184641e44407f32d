package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/memstore"
)

// claimAs claims key for owner and returns the token, or the claim's error.
func claimAs(s cache.Store, owner, key string) (string, error) {
	tok := cachetest.Token()
	_, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: time.Minute, Owner: owner})
	if err == nil && loaded {
		err = fmt.Errorf("claim %s: a record is there", key)
	}
	return tok, err
}

// putAs claims and completes key for owner with body.
func putAs(s cache.Store, owner, key string, body []byte) error {
	tok, err := claimAs(s, owner, key)
	if err != nil {
		return err
	}
	rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: body}}
	return s.Complete(context.Background(), key, tok, rec, time.Hour)
}

// has reports whether key holds a completed record with body.
func has(s cache.Store, key string, body []byte) bool {
	rec, err := s.Get(context.Background(), key)
	return err == nil && rec.State == cache.StateCompleted && bytes.Equal(rec.Response.Body, body)
}

// Another owner's flood of large responses never evicts a protected owner's
// completed records: the flooder is over its share, so it pays for its own
// volume, and its requests keep succeeding.
func TestFloodNeverEvictsAnotherOwnersRecords(t *testing.T) {
	const limit = 64 << 10
	for _, shards := range []int{1, 4, 64} {
		t.Run(fmt.Sprint(shards, " shards"), func(t *testing.T) {
			s, _ := newStore(t, memstore.Options{MaxBytes: limit, Shards: shards})
			for i := range 3 {
				if err := putAs(s, "victim", fmt.Sprint("charge-", i), []byte(fmt.Sprint("charged ", i))); err != nil {
					t.Fatal(err)
				}
			}
			big := bytes.Repeat([]byte("x"), 1<<10)
			for i := range 700 { // 700 KiB through a 64 KiB store
				if err := putAs(s, "flooder", fmt.Sprint("flood-", i), big); err != nil {
					t.Fatalf("flood request %d: %v", i, err)
				}
				if b := s.Bytes(); b > limit {
					t.Fatalf("after flood request %d: %d bytes held, bound %d", i, b, limit)
				}
				if i%50 == 0 {
					checkInvariants(t, s)
				}
			}
			for i := range 3 {
				if !has(s, fmt.Sprint("charge-", i), []byte(fmt.Sprint("charged ", i))) {
					t.Fatalf("the victim's charge-%d was evicted by another owner's flood", i)
				}
			}
			if !has(s, "flood-699", big) {
				t.Fatal("the flooder's newest record is gone")
			}
			checkInvariants(t, s)
		})
	}
}

// An owner over its share has its oldest records evicted for a newcomer,
// until it is back at its share; then the newcomer, at its own share, evicts
// its own records, never the other's.
func TestOverShareOwnerEvictedThenOwn(t *testing.T) {
	s, _ := newStore(t, memstore.Options{MaxRecords: 100, Shards: 1})
	for i := range 100 {
		if err := putAs(s, "heavy", fmt.Sprint("h", i), []byte("h")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 80 {
		if err := putAs(s, "new", fmt.Sprint("n", i), []byte("n")); err != nil {
			t.Fatalf("newcomer's record %d: %v", i, err)
		}
		checkInvariants(t, s)
	}
	// Two owners: a share is 50 records each.
	if r, _ := memstore.Usage(s, "heavy"); r != 50 {
		t.Fatalf("the heavy owner holds %d records, want its share of 50", r)
	}
	if r, _ := memstore.Usage(s, "new"); r != 50 {
		t.Fatalf("the newcomer holds %d records, want its share of 50", r)
	}
	for i := range 100 {
		if got, want := has(s, fmt.Sprint("h", i), []byte("h")), i >= 50; got != want {
			t.Fatalf("heavy record h%d present=%v, want %v (its oldest go)", i, got, want)
		}
	}
	if !has(s, "n79", []byte("n")) {
		t.Fatal("the newcomer's newest record is gone")
	}
}

// An owner within its share evicts its own records only when nothing else may
// go (here: the rest are another owner's in-flight claims), and a claim with
// nothing at all to evict gets ErrFull.
func TestOwnRecordsAsALastResort(t *testing.T) {
	s, _ := newStore(t, memstore.Options{MaxRecords: 4, Shards: 2})
	if err := putAs(s, "a", "a0", []byte("a0")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := claimAs(s, "b", fmt.Sprint("b", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := claimAs(s, "c", "c0"); !errors.Is(err, cache.ErrFull) {
		t.Fatalf("a newcomer's claim with only a's protected record and b's locks: %v, want ErrFull", err)
	}
	if !has(s, "a0", []byte("a0")) {
		t.Fatal("a's record was evicted for another owner")
	}
	// a holds 1 of its share of 2: its own record goes only as the last resort.
	if err := putAs(s, "a", "a1", []byte("a1")); err != nil {
		t.Fatalf("a's second record: %v", err)
	}
	if has(s, "a0", []byte("a0")) || !has(s, "a1", []byte("a1")) {
		t.Fatal("a's own oldest record should have made room for its new one")
	}
	checkInvariants(t, s)
}

// Owners minted without end (an attacker choosing Authorization values) cannot
// shrink a share below the bound over shareFloor (1024): once the store is
// full of owners within that share, a newcomer's claim is refused with
// ErrFull, its large completion too, and every record stays. The
// not-replayable marker the core then stores always fits in place of the
// lock, so the key is still remembered as done.
func TestMintedOwnersEndInRefusalAndTheMarkerFits(t *testing.T) {
	const limit = 1024 * 600 // a share of at least 600 bytes, however many owners
	s, _ := newStore(t, memstore.Options{MaxBytes: limit})
	ctx := context.Background()
	trace := bytes.Repeat([]byte{7}, cache.MaxTrace)
	// Locks taken while there was room, by owners that have nothing else.
	var held []string
	for i := range 20 {
		key := fmt.Sprint("held-", i)
		tok := strings.Repeat("t", 1+i) // tokens of every length down to one byte
		if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: strings.Repeat("f", 32), Duration: time.Minute, Trace: trace, Owner: fmt.Sprint("holder-", i)}); err != nil {
			t.Fatal(err)
		}
		held = append(held, tok)
	}
	body := bytes.Repeat([]byte("m"), 300)
	// Each minted owner claims a key and completes it; when its completion
	// does not fit, it stores the marker, as the core does.
	markers := map[int]bool{}
	minted := 0
	for ; ; minted++ {
		owner, key := fmt.Sprint("minted-", minted), fmt.Sprint("m", minted)
		tok, err := claimAs(s, owner, key)
		if errors.Is(err, cache.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: body}}
		err = s.Complete(ctx, key, tok, rec, time.Hour)
		if errors.Is(err, cache.ErrFull) {
			markers[minted] = true
			rec = &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, BodySize: 300, Oversize: true}}
			err = s.Complete(ctx, key, tok, rec, time.Hour)
		}
		if err != nil {
			t.Fatalf("minted owner %d's record: %v", minted, err)
		}
		if minted > 10_000 {
			t.Fatal("the store never filled")
		}
	}
	if minted < 900 || len(markers) > minted/4 {
		t.Fatalf("refused after %d owners, %d of them not replayable", minted, len(markers))
	}
	// Every minted owner's record is still there: evicting any would have
	// taken a record within its share for another owner.
	stillThere := func() {
		t.Helper()
		for i := range minted {
			key := fmt.Sprint("m", i)
			if markers[i] {
				if rec, err := s.Get(ctx, key); err != nil || !rec.Response.Oversize {
					t.Fatalf("minted owner %d's marker: %+v %v", i, rec, err)
				}
			} else if !has(s, key, body) {
				t.Fatalf("minted owner %d's record was evicted", i)
			}
		}
	}
	stillThere()
	checkInvariants(t, s)

	for i, tok := range held {
		key := fmt.Sprint("held-", i)
		// More than the chunks' spare room that compaction could win back.
		full := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: bytes.Repeat([]byte("r"), 200<<10), Trace: trace}}
		if err := s.Complete(ctx, key, tok, full, time.Hour); !errors.Is(err, cache.ErrFull) {
			t.Fatalf("a 200 KiB completion with nothing evictable: %v, want ErrFull", err)
		}
		marker := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, BodySize: 200 << 10, Oversize: true, Trace: trace}}
		if err := s.Complete(ctx, key, tok, marker, time.Hour); err != nil {
			t.Fatalf("the not-replayable marker for %s did not fit in place of its lock: %v", key, err)
		}
		rec, err := s.Get(ctx, key)
		if err != nil || !rec.Response.Oversize || rec.Response.BodySize != 200<<10 {
			t.Fatalf("%s after the marker: %+v %v", key, rec, err)
		}
		if b := s.Bytes(); b > limit {
			t.Fatalf("the marker took the store to %d bytes, bound %d", b, limit)
		}
		checkInvariants(t, s)
	}
	stillThere()
}

// A protected record at the head of a log is moved to its tail, so the head
// keeps moving and the chunks behind it come back: in one shard, with the
// victim's record first, a flood as large as the store many times over still
// succeeds within the bound, the victim's record reads back whole, and the
// log holds no more chunks than the bound allows.
func TestCompactionKeepsTheHeadMoving(t *testing.T) {
	const limit = 32 << 10
	s, clk := newStore(t, memstore.Options{MaxBytes: limit, Shards: 1})
	victim := bytes.Repeat([]byte("v"), 100)
	if err := putAs(s, "victim", "v", victim); err != nil {
		t.Fatal(err)
	}
	// Small records share chunks with the victim's: compaction must move it
	// out of a chunk it shares.
	for i := range 2000 {
		if err := putAs(s, "flooder", fmt.Sprint("f", i), bytes.Repeat([]byte{byte(i)}, 50+i%400)); err != nil {
			t.Fatalf("flood request %d: %v", i, err)
		}
		if b := s.Bytes(); b > limit {
			t.Fatalf("after flood request %d: %d bytes held, bound %d", i, b, limit)
		}
		if i%25 == 0 {
			checkInvariants(t, s)
		}
	}
	if !has(s, "v", victim) {
		t.Fatal("the victim's record was lost")
	}
	if c := memstore.Chunks(s); c > limit/512 {
		t.Fatalf("%d chunks held under a %d-byte bound", c, limit)
	}
	// Once its record expired, the victim's is no different from a hole.
	clk.Advance(2 * time.Hour)
	if err := putAs(s, "flooder", "after", []byte("x")); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if s.Len() != 1 {
		t.Fatalf("after expiry: %d records, want 1", s.Len())
	}
	checkInvariants(t, s)
}

// Random operations by several owners, with the invariants checked after
// every one: the counts stay exact through claims, completions (markers in
// their own chunks included), releases, deletes, resolves, expiry, sweeps,
// compaction and lowered bounds. A victim whose one record stays within the
// smallest share is never evicted.
func TestRandomOperationsKeepTheAccountsExact(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			const limit = 48 << 10 // a victim's record of ~200 bytes is within any share
			rng := rand.New(rand.NewPCG(seed, 1))
			s, clk := newStore(t, memstore.Options{MaxBytes: limit, MaxRecords: 300, Shards: 1 + int(seed)*3})
			ctx := context.Background()
			if err := putAs(s, "victim", "victim-key", []byte("kept")); err != nil {
				t.Fatal(err)
			}
			type held struct{ key, tok string }
			var locks []held
			for op := range 4000 {
				owner := fmt.Sprint("o", rng.IntN(6))
				key := fmt.Sprint("k", rng.IntN(400))
				switch r := rng.IntN(100); {
				case r < 40:
					tok, err := claimAs(s, owner, key)
					if err == nil {
						locks = append(locks, held{key, tok})
					}
				case r < 70 && len(locks) > 0:
					i := rng.IntN(len(locks))
					l := locks[i]
					locks = append(locks[:i], locks[i+1:]...)
					resp := &cache.Response{Status: 201, Body: make([]byte, rng.IntN(3000))}
					if rng.IntN(10) == 0 {
						resp = &cache.Response{Status: 502, Unknown: true, Body: []byte("unknown")}
					}
					err := s.Complete(ctx, l.key, l.tok, &cache.Record{State: cache.StateCompleted, Response: resp}, time.Duration(1+rng.IntN(3))*time.Hour)
					if errors.Is(err, cache.ErrFull) {
						marker := &cache.Response{Status: 201, Oversize: true, BodySize: int64(len(resp.Body))}
						if err := s.Complete(ctx, l.key, l.tok, &cache.Record{State: cache.StateCompleted, Response: marker}, time.Hour); err != nil {
							t.Fatalf("op %d: the marker did not fit: %v", op, err)
						}
					}
				case r < 78 && len(locks) > 0:
					i := rng.IntN(len(locks))
					_ = s.Release(ctx, locks[i].key, locks[i].tok)
					locks = append(locks[:i], locks[i+1:]...)
				case r < 84:
					if key != "victim-key" {
						_ = s.Delete(ctx, key)
					}
				case r < 88:
					var resp *cache.Response
					if rng.IntN(2) == 0 {
						resp = &cache.Response{Status: 200, Body: make([]byte, rng.IntN(2000))}
					}
					_ = s.Resolve(ctx, key, resp, time.Hour)
				case r < 92:
					clk.Advance(time.Duration(rng.IntN(40)) * time.Minute)
					if err := putAs(s, "victim", "victim-key", []byte("kept")); err != nil && !strings.Contains(err.Error(), "a record is there") {
						t.Fatalf("op %d: the victim's record expired but could not be written again: %v", op, err)
					}
				case r < 95:
					s.Sweep()
				case r < 97:
					if err := s.SetBounds(300, int64(limit-rng.IntN(8<<10))); err != nil {
						t.Fatal(err)
					}
					if !has(s, "victim-key", []byte("kept")) {
						// A lowered bound evicts oldest first, whoever owns it:
						// an operator's choice, not another client's.
						if err := putAs(s, "victim", "victim-key", []byte("kept")); err != nil {
							t.Fatalf("op %d: %v", op, err)
						}
					}
				default:
					_, _ = s.Get(ctx, key)
				}
				checkInvariants(t, s)
				if maxR, maxB := s.Bounds(); s.Len() > maxR || s.Bytes() > maxB {
					t.Fatalf("op %d: %d records, %d bytes over the bounds %d, %d", op, s.Len(), s.Bytes(), maxR, maxB)
				}
				if !has(s, "victim-key", []byte("kept")) {
					t.Fatalf("op %d: the victim's record was evicted", op)
				}
			}
		})
	}
}

// Owners claiming, completing, releasing and deleting at once, on a store at
// its bounds: the race detector sees nothing, the bounds hold, and the counts
// are exact once they stop.
func TestConcurrentOwnersAtTheBounds(t *testing.T) {
	const limit = 96 << 10
	s, _ := newStore(t, memstore.Options{MaxBytes: limit, MaxRecords: 400, Shards: 4})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			owner := fmt.Sprint("owner-", w%3) // two writers per owner
			for i := range 1500 {
				key := fmt.Sprintf("w%d-%d", w, rng.IntN(600))
				tok, err := claimAs(s, owner, key)
				if err != nil {
					continue // a record is there, or nothing this owner may evict
				}
				switch rng.IntN(10) {
				case 0:
					_ = s.Release(ctx, key, tok)
				case 1:
					_ = s.Delete(ctx, key)
				default:
					rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: make([]byte, rng.IntN(1500))}}
					if err := s.Complete(ctx, key, tok, rec, time.Hour); errors.Is(err, cache.ErrFull) {
						rec = &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Oversize: true}}
						if err := s.Complete(ctx, key, tok, rec, time.Hour); err != nil {
							t.Errorf("the marker did not fit: %v", err)
							return
						}
					} else if err != nil {
						t.Errorf("complete %s: %v", key, err)
						return
					}
				}
				if maxR, maxB := s.Bounds(); s.Len() > maxR || s.Bytes() > maxB {
					t.Errorf("%d records, %d bytes: over the bounds", s.Len(), s.Bytes())
					return
				}
				if i%100 == 0 {
					s.Sweep()
				}
			}
		}(w)
	}
	wg.Wait()
	checkInvariants(t, s)
}
