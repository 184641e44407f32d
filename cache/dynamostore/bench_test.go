package dynamostore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

// BenchmarkCoreDynamoDB: the core's first execution and replay against
// DynamoDB Local on loopback, in parallel (2 requests and 1). DynamoDB Local
// is not DynamoDB: compare ratios, not times.
func BenchmarkCoreDynamoDB(b *testing.B) {
	middlewaretest.Bench(b, newEnv(b, dynamostore.Options{Now: time.Now}).store)
}

// BenchmarkStore: each operation alone, one at a time, with the DynamoDB
// requests it sent (requests/op).
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	e := newEnv(b, dynamostore.Options{Now: time.Now})
	s := e.store
	lock := func(tok string) cache.Claim { return cache.Claim{Token: tok, Fingerprint: "fp", Duration: time.Minute} }
	complete := func(b *testing.B, key string, body []byte) {
		if _, _, err := s.ClaimOrGet(ctx, key, lock("t-"+key)); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, key, "t-"+key, done(201, body), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	complete(b, "small", []byte(`{"id":"ch_1"}`))
	complete(b, "large", pattern(1<<20))
	if _, _, err := s.ClaimOrGet(ctx, "busy", lock("busy")); err != nil {
		b.Fatal(err)
	}
	run := func(name string, op func(b *testing.B, i int)) {
		b.Run(name, func(b *testing.B) {
			e.faults.Reset()
			for i := 0; i < b.N; i++ {
				op(b, i)
			}
			b.ReportMetric(float64(e.faults.Total())/float64(b.N), "requests/op")
		})
	}
	run("Claim", func(b *testing.B, i int) {
		if _, loaded, err := s.ClaimOrGet(ctx, b.Name()+strconv.Itoa(i), lock("t")); err != nil || loaded {
			b.Fatal(loaded, err)
		}
	})
	run("ClaimComplete", func(b *testing.B, i int) { complete(b, b.Name()+strconv.Itoa(i), []byte(`{"id":"ch_1"}`)) })
	run("ClaimComplete1MiB", func(b *testing.B, i int) { complete(b, b.Name()+strconv.Itoa(i), pattern(1<<20)) })
	for _, key := range []string{"small", "large", "busy"} {
		name := map[string]string{"small": "Replay", "large": "Replay1MiB", "busy": "Conflict"}[key]
		run(name, func(b *testing.B, i int) {
			if _, loaded, err := s.ClaimOrGet(ctx, key, lock("other")); err != nil || !loaded {
				b.Fatal(loaded, err)
			}
		})
	}
}
