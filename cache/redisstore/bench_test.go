package redisstore_test

import (
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

// BenchmarkCoreRedis: the core's first execution and replay against a real Redis
// on loopback, with the local cache off (each includes the round trips: 2 and
// 1) and at its default (a replay the cache holds makes none).
func BenchmarkCoreRedis(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []struct {
		name  string
		local int64
	}{{"cache=off", -1}, {"cache=default", 0}} {
		b.Run(c.name, func(b *testing.B) {
			store := mustNew(b, srv.Client(), redisstore.Options{Prefix: c.name + ":", LocalCache: c.local})
			defer store.Close()
			time.Sleep(300 * time.Millisecond) // the cache trusts its subscription
			middlewaretest.Bench(b, store)
		})
	}
}
