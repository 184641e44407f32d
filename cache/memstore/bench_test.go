package memstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
)

// benchKeys makes n keys as the middleware makes them (hex SHA-256).
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		sum := sha256.Sum256([]byte(fmt.Sprint("bench-", i)))
		keys[i] = hex.EncodeToString(sum[:])
	}
	return keys
}

// claimComplete runs one request's store calls: a claim and its completion
// with a 64-byte body, for owner.
func claimComplete(b *testing.B, s *memstore.Store, key, tok, owner string) {
	ctx := context.Background()
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "0123456789abcdef0123456789abcdef", Duration: time.Minute, Owner: owner}); err != nil || loaded {
		b.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: benchBody, BodySize: 64}}
	if err := s.Complete(ctx, key, tok, rec, time.Hour); err != nil {
		b.Fatalf("complete: %v", err)
	}
}

var (
	benchBody   = make([]byte, 64)
	benchOwners = func() (o [16]string) {
		for i := range o {
			o[i] = fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		}
		return o
	}()
)

// BenchmarkClaimComplete: a claim and a completion on a store far from its
// bounds (the common case).
func BenchmarkClaimComplete(b *testing.B) {
	s, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	keys := benchKeys(1 << 16)
	var i int
	for b.Loop() {
		if i == len(keys) { // start again on an empty store
			b.StopTimer()
			s.Close()
			if s, err = memstore.New(memstore.Options{SweepInterval: -1}); err != nil {
				b.Fatal(err)
			}
			i = 0
			b.StartTimer()
		}
		claimComplete(b, s, keys[i], fmt.Sprintf("%032x", i), benchOwners[i%len(benchOwners)])
		i++
	}
}

// BenchmarkClaimCompleteAtBound: the store is at its record bound, so every
// claim evicts a completed record first: with one owner, its own oldest; with
// 16 owners taking turns, every owner is at its share, and each claim evicts
// one of its own owner's records from among the others' (the costliest case).
func BenchmarkClaimCompleteAtBound(b *testing.B) {
	const bound = 10_000
	for _, owners := range []int{1, 16} {
		b.Run(fmt.Sprint("owners=", owners), func(b *testing.B) {
			s, err := memstore.New(memstore.Options{SweepInterval: -1, MaxRecords: bound})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			keys := benchKeys(1 << 16)
			var i int
			for b.Loop() {
				k := keys[i%len(keys)]
				_ = s.Delete(context.Background(), k) // a key used before, in an earlier lap
				claimComplete(b, s, k, fmt.Sprintf("%032x", i), benchOwners[i%owners])
				i++
			}
			if s.Len() > bound {
				b.Fatalf("%d records over the bound of %d", s.Len(), bound)
			}
		})
	}
}

// BenchmarkClaimCompleteParallel: claims and completions from every core.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	s, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			sum := sha256.Sum256(fmt.Append(nil, "par-", i))
			claimComplete(b, s, hex.EncodeToString(sum[:]), fmt.Sprintf("%032x", i), benchOwners[i%int64(len(benchOwners))])
		}
	})
}
