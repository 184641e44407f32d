package memstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
)

// BenchmarkListHeld lists the held outcomes of a store of 100,000 completed
// records, 100 of them held: what one page of an operator's listing costs.
func BenchmarkListHeld(b *testing.B) {
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 100_000 {
		var k [32]byte
		_, _ = rand.Read(k[:])
		key := hex.EncodeToString(k[:])
		if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "fp", Duration: time.Minute}); err != nil {
			b.Fatal(err)
		}
		resp := &cache.Response{Status: 201, Body: make([]byte, 200)}
		if i%1000 == 0 {
			resp = &cache.Response{Status: 502, Unknown: true}
		}
		if err := s.Complete(ctx, key, "t", &cache.Record{Fingerprint: "fp", Response: resp}, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		page, err := s.List(ctx, cache.ListQuery{Held: true})
		if err != nil || len(page.Records) != 100 {
			b.Fatalf("%d records, %v", len(page.Records), err)
		}
	}
}
