package memstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
)

// BenchmarkBytesPerRecord measures the heap a completed record costs beyond its
// body: N records with a 64-byte body and a typical header set, keys made as the
// middleware makes them (hex SHA-256, per request), heap measured with
// runtime.MemStats. It reports overhead-B/record: everything but the body bytes,
// so the stored Content-Type header counts as overhead too.
func BenchmarkBytesPerRecord(b *testing.B) {
	const n = 100_000
	body := make([]byte, 64)
	hdr := map[string][]string{"Content-Type": {"application/json"}}
	for b.Loop() {
		s, err := memstore.New(memstore.Options{SweepInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		// Keys are made per request, as the middleware makes them: what the store
		// keeps of them counts.
		before := heap()
		for i := 0; i < n; i++ {
			sum := sha256.Sum256([]byte(fmt.Sprint("key-", i)))
			k := hex.EncodeToString(sum[:])
			tok := fmt.Sprintf("%032x", i)
			if _, _, err := s.ClaimOrGet(ctx, k, cache.Claim{Token: tok, Fingerprint: "0123456789abcdef0123456789abcdef", Duration: time.Minute}); err != nil {
				b.Fatal(err)
			}
			rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Header: hdr, Body: body, BodySize: 64}}
			if err := s.Complete(ctx, k, tok, rec, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		after := heap()
		if s.Len() != n {
			b.Fatalf("the store holds %d records, want %d", s.Len(), n)
		}
		perRecord := float64(after-before) / n
		b.ReportMetric(perRecord, "B/record")
		b.ReportMetric(perRecord-float64(len(body)), "overhead-B/record")
		runtime.KeepAlive(s)
		s.Close()
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
