package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/memstore"
)

// Keys that share an index slot (forced here; 128 bits of seeded hash make it
// practically impossible otherwise) are never answered with each other's record.
func TestIndexPrefixCollision(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 1})
	memstore.ForceIndexCollisions(s)
	ctx := context.Background()
	a, b := "key-a", strings.Repeat("ab", 32)
	complete(t, s, a, []byte("record a"))
	tok := cachetest.Token()
	rec, loaded, err := s.ClaimOrGet(ctx, b, lockFor(tok))
	if err != nil || loaded {
		t.Fatalf("b was answered with a's record: loaded=%v rec=%+v err=%v", loaded, rec, err)
	}
	if err := s.Complete(ctx, b, tok, &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200, Body: []byte("record b")}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, b)
	if err != nil || string(got.Response.Body) != "record b" {
		t.Fatalf("Get b: %+v %v", got, err)
	}
	// b took the slot: a is gone (as if evicted), never answered with b's record.
	if got, err := s.Get(ctx, a); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get a after b took its slot: %+v %v", got, err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d, want 1", s.Len())
	}
	checkInvariants(t, s)
}

// Records deleted out of order leave holes in the log; the space comes back when
// the head passes them, and an emptied store holds no bytes at all.
func TestHolesAreReclaimed(t *testing.T) {
	s, clk := newStore(t, memstore.Options{Shards: 1})
	ctx := context.Background()
	body := make([]byte, 700)
	for i := 0; i < 200; i++ { // several chunks' worth
		complete(t, s, fmt.Sprint("k", i), body)
	}
	full := s.Bytes()
	for i := 0; i < 200; i += 2 {
		if err := s.Delete(ctx, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	checkInvariants(t, s)
	if s.Len() != 100 {
		t.Fatalf("Len = %d, want 100", s.Len())
	}
	for i := 1; i < 200; i += 2 {
		if rec, err := s.Get(ctx, fmt.Sprint("k", i)); err != nil || len(rec.Response.Body) != 700 {
			t.Fatalf("k%d after its neighbours were deleted: %v", i, err)
		}
	}
	clk.Advance(2 * time.Hour)
	s.Sweep()
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("after expiry: Len %d, Bytes %d (of %d), want 0, 0", s.Len(), s.Bytes(), full)
	}
	complete(t, s, "again", []byte("x")) // the emptied log takes records again
	if rec, err := s.Get(ctx, "again"); err != nil || string(rec.Response.Body) != "x" {
		t.Fatalf("after reuse: %+v %v", rec, err)
	}
	checkInvariants(t, s)
}

// A record larger than a chunk gets a chunk of its own, and reads back whole.
func TestRecordLargerThanChunk(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 2})
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	complete(t, s, "small-1", []byte("a"))
	complete(t, s, "big", big)
	complete(t, s, "small-2", []byte("b"))
	rec, err := s.Get(context.Background(), "big")
	if err != nil || !bytes.Equal(rec.Response.Body, big) {
		t.Fatalf("big record: err %v, %d bytes back", err, len(rec.Response.Body))
	}
	checkInvariants(t, s)
}

// Readers decode entries outside the shard lock while writers append to the same
// chunk and eviction drops chunks: the race detector must see nothing, and every
// read returns the record that was written.
func TestConcurrentAppendReadEvict(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 1, MaxRecords: 300})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				tok := cachetest.Token()
				if _, loaded, err := s.ClaimOrGet(ctx, key, lockFor(tok)); err != nil || loaded {
					t.Errorf("claim %s: loaded=%v err=%v", key, loaded, err)
					return
				}
				body := []byte(key)
				if err := s.Complete(ctx, key, tok, &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: body}}, time.Hour); err != nil {
					t.Errorf("complete %s: %v", key, err)
					return
				}
				for j := max(0, i-5); j <= i; j++ {
					k := fmt.Sprintf("w%d-%d", w, j)
					rec, loaded, err := s.ClaimOrGet(ctx, k, lockFor(cachetest.Token()))
					if err != nil {
						t.Errorf("read %s: %v", k, err)
						return
					}
					if loaded && rec.State == cache.StateCompleted && string(rec.Response.Body) != k {
						t.Errorf("read %s: got the body %q", k, rec.Response.Body)
						return
					}
					if !loaded { // evicted and now claimed by this read: let it go
						_ = s.Delete(ctx, k)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	if n := s.Len(); n > 300 {
		t.Fatalf("Len = %d over the bound of 300", n)
	}
	checkInvariants(t, s)
}

// Keys with structure (hex counters sharing a long zero prefix, as a caller
// other than the middleware may choose) each keep their own record.
func TestStructuredKeys(t *testing.T) {
	s, _ := newStore(t, memstore.Options{})
	ctx := context.Background()
	const n = 20000
	for i := range n {
		complete(t, s, fmt.Sprintf("%064x", i), []byte(fmt.Sprint(i)))
	}
	if s.Len() != n {
		t.Fatalf("Len = %d, want %d", s.Len(), n)
	}
	for i := range n {
		rec, err := s.Get(ctx, fmt.Sprintf("%064x", i))
		if err != nil || string(rec.Response.Body) != fmt.Sprint(i) {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	checkInvariants(t, s)
}
