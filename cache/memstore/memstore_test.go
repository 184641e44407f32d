package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

func TestConformance(t *testing.T) {
	cachetest.Run(t, func(t *testing.T) cachetest.Harness {
		clk := cachetest.NewClock()
		s, err := memstore.New(memstore.Options{Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		t.Cleanup(func() { checkInvariants(t, s) })
		return cachetest.Harness{Store: s, Clock: clk}
	})
}

// newStore is a store with opts, on a test clock, without a sweeper.
func newStore(t *testing.T, opts memstore.Options) (*memstore.Store, *cachetest.Clock) {
	t.Helper()
	clk := cachetest.NewClock()
	opts.Now, opts.SweepInterval = clk.Now, -1
	s, err := memstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// checkInvariants fails the test unless the store's counts are exactly what
// it holds (see memstore.CheckInvariants).
func checkInvariants(t *testing.T, s *memstore.Store) {
	t.Helper()
	if err := memstore.CheckInvariants(s); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

func lockFor(tok string) cache.Claim {
	return cache.Claim{Token: tok, Fingerprint: "fp", Duration: time.Minute}
}

func complete(t *testing.T, s cache.Store, key string, body []byte) {
	t.Helper()
	ctx := context.Background()
	tok := cachetest.Token()
	if _, loaded, err := s.ClaimOrGet(ctx, key, lockFor(tok)); err != nil || loaded {
		t.Fatalf("claim %s: loaded=%v err=%v", key, loaded, err)
	}
	rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200, Body: body}}
	if err := s.Complete(ctx, key, tok, rec, time.Hour); err != nil {
		t.Fatalf("complete %s: %v", key, err)
	}
}

func TestMaxRecordsEvictsOldestCompleted(t *testing.T) {
	s, _ := newStore(t, memstore.Options{MaxRecords: 3, Shards: 1})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		complete(t, s, fmt.Sprint("k", i), []byte("x"))
	}
	complete(t, s, "k3", []byte("x"))
	if got := s.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	if _, err := s.Get(ctx, "k0"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("oldest record k0 not evicted: err = %v", err)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("%s evicted: %v", k, err)
		}
	}
	checkInvariants(t, s)
}

func TestInFlightNeverEvicted(t *testing.T) {
	s, _ := newStore(t, memstore.Options{MaxRecords: 2, Shards: 4})
	ctx := context.Background()
	a, b := cachetest.Token(), cachetest.Token()
	if _, _, err := s.ClaimOrGet(ctx, "a", lockFor(a)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ClaimOrGet(ctx, "b", lockFor(b)); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.ClaimOrGet(ctx, "c", lockFor(cachetest.Token()))
	if !errors.Is(err, cache.ErrFull) {
		t.Fatalf("third lock with two in flight: err = %v, want ErrFull", err)
	}
	if _, err := s.Get(ctx, "c"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("refused lock left a record behind: %v", err)
	}
	for k, tok := range map[string]string{"a": a, "b": b} {
		if err := s.Extend(ctx, k, tok, time.Minute); err != nil {
			t.Fatalf("in-flight lock %s lost: %v", k, err)
		}
	}
	// Once one completes, a new claim evicts it (completed first), never the other claim.
	if err := s.Complete(ctx, "a", a, &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ClaimOrGet(ctx, "c", lockFor(cachetest.Token())); err != nil {
		t.Fatalf("lock after a completion: %v", err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("completed a should have been evicted: %v", err)
	}
	if err := s.Extend(ctx, "b", b, time.Minute); err != nil {
		t.Fatalf("in-flight b evicted: %v", err)
	}
	checkInvariants(t, s)
}

func TestMaxBytesEvicts(t *testing.T) {
	const limit = 64 << 10
	s, _ := newStore(t, memstore.Options{MaxBytes: limit, Shards: 8})
	body := make([]byte, 4<<10)
	for i := 0; i < 100; i++ {
		complete(t, s, fmt.Sprint("k", i), body)
		if b := s.Bytes(); b > limit {
			t.Fatalf("after %d records: %d bytes held, bound %d", i+1, b, limit)
		}
		checkInvariants(t, s)
	}
	if n := s.Len(); n < 10 || n > 16 {
		t.Fatalf("Len = %d, want the bound's worth (10-16) of 4 KiB records", n)
	}
	// The newest record always survives its own insertion.
	if _, err := s.Get(context.Background(), "k99"); err != nil {
		t.Fatalf("newest record evicted: %v", err)
	}
	checkInvariants(t, s)
}

func TestRecordLargerThanBound(t *testing.T) {
	s, _ := newStore(t, memstore.Options{MaxBytes: 1 << 10})
	ctx := context.Background()
	tok := cachetest.Token()
	if _, _, err := s.ClaimOrGet(ctx, "big", lockFor(tok)); err != nil {
		t.Fatal(err)
	}
	rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200, Body: make([]byte, 4<<10)}}
	if err := s.Complete(ctx, "big", tok, rec, time.Hour); !errors.Is(err, cache.ErrFull) {
		t.Fatalf("Complete of a record above the bound: err = %v, want ErrFull", err)
	}
	// The lock is untouched, so the caller can still release it.
	if err := s.Release(ctx, "big", tok); err != nil {
		t.Fatalf("Release: %v", err)
	}
	checkInvariants(t, s)
}

func TestSweepRemovesExpired(t *testing.T) {
	s, clk := newStore(t, memstore.Options{})
	ctx := context.Background()
	complete(t, s, "done", []byte("x"))
	if _, _, err := s.ClaimOrGet(ctx, "lock", lockFor(cachetest.Token())); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if s.Len() != 2 {
		t.Fatalf("Sweep removed live records: Len = %d", s.Len())
	}
	clk.Advance(2 * time.Minute) // claim lapsed, record (1h) still live
	s.Sweep()
	if s.Len() != 1 {
		t.Fatalf("Len after lease lapse = %d, want 1", s.Len())
	}
	clk.Advance(2 * time.Hour)
	s.Sweep()
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("after TTL: Len = %d, Bytes = %d, want 0, 0", s.Len(), s.Bytes())
	}
	checkInvariants(t, s)
}

func TestBackgroundSweeperAndClose(t *testing.T) {
	clk := cachetest.NewClock()
	s, err := memstore.New(memstore.Options{Now: clk.Now, SweepInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	complete(t, s, "k", []byte("x"))
	clk.Advance(2 * time.Hour)
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("background sweeper did not remove an expired record within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}

func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]memstore.Options{
		"records":    {MaxRecords: -1},
		"bytes":      {MaxBytes: -1},
		"shards":     {Shards: -1},
		"shards cap": {Shards: 4097},
	} {
		if _, err := memstore.New(opt); err == nil {
			t.Errorf("%s: New accepted a bad option", name)
		}
	}
}

func ExampleStore() {
	s, err := memstore.New(memstore.Options{MaxRecords: 100_000})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	_, loaded, _ := s.ClaimOrGet(ctx, "key", cache.Claim{Token: "t1", Fingerprint: "fp", Duration: 30 * time.Second})
	fmt.Println("first claim loaded:", loaded)
	rec, loaded, _ := s.ClaimOrGet(ctx, "key", cache.Claim{Token: "t2", Fingerprint: "fp", Duration: 30 * time.Second})
	fmt.Println("second claim loaded:", loaded, rec.State)
	_ = s.Complete(ctx, "key", "t1", &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201}}, time.Hour)
	rec, _ = s.Get(ctx, "key")
	fmt.Println(rec.State, rec.Response.Status)
	// Output:
	// first claim loaded: false
	// second claim loaded: true in_flight
	// completed 201
}

// The core's behaviour suite on the memory store.
func TestMiddlewareSuite(t *testing.T) {
	middlewaretest.Run(t, func(t *testing.T) cache.Store {
		s, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// SetBounds applies new bounds to a live store: records survive a raise, a
// lowering evicts the oldest completed ones, never an in-flight claim.
func TestSetBoundsOnALiveStore(t *testing.T) {
	s, err := memstore.New(memstore.Options{MaxRecords: 10, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 6 {
		key := fmt.Sprint("k", i)
		tok := cachetest.Token()
		if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if i < 5 {
			if err := s.Complete(ctx, key, tok, &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200}}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.SetBounds(1000, 1<<20); err != nil || s.Len() != 6 {
		t.Fatalf("raise: %v, %d records", err, s.Len())
	}
	if err := s.SetBounds(2, 1<<20); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("%d records after lowering to 2", s.Len())
	}
	if rec, err := s.Get(ctx, "k5"); err != nil || rec.State != cache.StateInFlight {
		t.Fatalf("the in-flight lock was evicted: %v %v", rec, err)
	}
	if err := s.SetBounds(0, 1); err == nil {
		t.Fatal("zero bound accepted")
	}
	checkInvariants(t, s)
}
