package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
)

// complete claims and completes key through s with a 201.
func complete(t *testing.T, s *pgstore.Store, key string) {
	t.Helper()
	ctx := context.Background()
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: key + "-tok", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claiming %s: loaded=%v %v", key, loaded, err)
	}
	if err := s.Complete(ctx, key, key+"-tok", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatalf("completing %s: %v", key, err)
	}
}

// answeredFromCache reads key through s until its local cache answers it
// (Hits grows), for up to 5s.
func answeredFromCache(t *testing.T, s *pgstore.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		before, _ := s.LocalCacheStats()
		if _, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: "reader", Fingerprint: "f", Duration: time.Minute}); err != nil || !loaded {
			t.Fatalf("reading %s: loaded=%v %v", key, loaded, err)
		}
		if after, _ := s.LocalCacheStats(); after.Hits > before.Hits {
			return
		}
		if time.Now().After(deadline) {
			st, _ := s.LocalCacheStats()
			t.Fatalf("%s was not answered from the local cache within 5s: %+v", key, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Delete or Resolve whose context ends while it waits for every instance's
// cache to drop the key says so: it does not report the change settled.
func TestSettleCutShort(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.Options{Table: "settle"})
	for _, op := range []string{"delete", "resolve"} {
		key := op
		if op == "delete" {
			complete(t, s, key)
		} else {
			ctx := context.Background()
			if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "h", Fingerprint: "f", Duration: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(ctx, key, "h", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 502, Unknown: true}}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond) // half the settle window
		start := time.Now()
		var err error
		if op == "delete" {
			err = s.Delete(ctx, key)
		} else {
			err = s.Resolve(ctx, key, nil, 0)
		}
		cancel()
		if _, gerr := s.Get(context.Background(), key); !errors.Is(gerr, cache.ErrNotFound) {
			t.Skipf("%s: the statement itself did not finish within 100ms (%v): nothing to settle", op, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s cut short after %v: %v, want context.DeadlineExceeded", op, time.Since(start).Round(time.Millisecond), err)
		}
	}
}
